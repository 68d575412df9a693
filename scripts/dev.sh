#!/usr/bin/env bash
# Runs secgpt's Matrix bot against a local Dendrite homeserver, in one
# command (`make dev`): builds Dendrite once (cached outside the repository),
# starts it on 127.0.0.1 only with federation off, registers the bot
# (@secgpt:localhost) and a user (@you:localhost), writes the bot's config,
# prints how to log in, and runs the bot until Ctrl-C, which stops the bot
# and Dendrite. The console keeps only the banner and a line per start or
# stop: the homeserver's and the bot's logs go to files the banner names.
#
# Registration is off. While `make dev` runs, `scripts/dev.sh user NAME`
# (in another terminal) adds @NAME:localhost with a password of its own and
# prints it, e.g. a second user to try a shared room with.
#
# State (homeserver database, keys, passwords, the bot's SQLite file) stays
# in $SECGPT_DEV_DIR (default ~/.local/share/secgpt/dev), so a second run
# keeps your account, rooms and grants. Delete the directory to start over.
#
# The model: the built-in simulated model, unless SECGPT_LLM_BASE_URL (an
# OpenAI-compatible endpoint, e.g. Ollama's http://127.0.0.1:11434/v1, with
# SECGPT_LLM_MODEL) or OPENAI_API_KEY is set.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dendrite_bin=$("$repo/scripts/build-dendrite.sh")
dir=${SECGPT_DEV_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/secgpt/dev}
hsdir="$dir/dendrite"
mkdir -p "$hsdir/data"
chmod 700 "$dir"
umask 077

# Secrets made once: the registration secret and both passwords.
secret() { head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
creds="$dir/credentials"
if [ ! -f "$creds" ]; then
  printf 'REG_SECRET=%s\nBOT_PASSWORD=%s\nYOU_PASSWORD=%s\n' "$(secret)" "$(secret)" "$(secret)" > "$creds"
fi
# shellcheck disable=SC1090
. "$creds"

register() { # user password; an existing account is fine
  out=$(cd "$hsdir" && "$dendrite_bin/create-account" -config dendrite.yaml -url "$hs" -username "$1" -passwordstdin <<<"$2" 2>&1) ||
    grep -qiE 'already (exists|taken)|in use' <<<"$out" || { echo "$out" >&2; exit 1; }
}

if [ "${1:-}" = user ]; then
  name=${2:-}
  if ! [[ "$name" =~ ^[a-z0-9._-]+$ ]]; then
    echo "usage: scripts/dev.sh user NAME   (NAME: lower-case letters, digits, . _ -)" >&2
    exit 2
  fi
  hs="http://127.0.0.1:$(cat "$hsdir/port" 2>/dev/null || echo 8008)"
  if ! curl -fsS "$hs/_matrix/client/versions" >/dev/null 2>&1; then
    echo "The local homeserver is not running: start it with make dev, then run this again." >&2
    exit 1
  fi
  users="$dir/users"
  password=""
  [ -f "$users" ] && password=$(sed -n "s/^$name=//p" "$users" | tail -n 1)
  if [ -z "$password" ]; then
    password=$(secret)
    printf '%s=%s\n' "$name" "$password" >> "$users"
  fi
  register "$name" "$password"
  echo "Added @$name:localhost (password: $password) on $hs."
  echo "Sign in as \"$name\" in a second client (or a private browser window), then invite @$name:localhost and @secgpt:localhost to a room."
  exit 0
fi

cd "$hsdir"
[ -f matrix_key.pem ] || "$dendrite_bin/generate-keys" --private-key matrix_key.pem >/dev/null
if [ ! -f dendrite.yaml ]; then
  # -ci: SQLite, in-memory JetStream, no rate limits (a local playground).
  "$dendrite_bin/generate-config" -ci -dir "$hsdir/data" -server localhost |
    sed -e 's/disable_federation: false/disable_federation: true/' \
        -e 's/registration_disabled: false/registration_disabled: true/' \
        -e "s/registration_shared_secret: .*/registration_shared_secret: $REG_SECRET/" \
        -e 's/level: trace/level: warn/' > dendrite.yaml
fi

# A free loopback port, the same as last time when it is still free.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=$(cat port 2>/dev/null || echo 8008)
if ! port_free "$port"; then
  for port in $(seq 8008 8099); do port_free "$port" && break; done
fi
https_port=$((port + 1000))
echo "$port" > port
hs="http://127.0.0.1:$port"

"$dendrite_bin/dendrite" -config dendrite.yaml \
  -http-bind-address "127.0.0.1:$port" -https-bind-address "127.0.0.1:$https_port" \
  >>"$hsdir/dendrite.log" 2>&1 &
dendrite_pid=$!
trap 'kill "$dendrite_pid" 2>/dev/null; wait "$dendrite_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -fsS "$hs/_matrix/client/versions" >/dev/null 2>&1 && break
  kill -0 "$dendrite_pid" 2>/dev/null || { echo "Dendrite did not start; see $hsdir/dendrite.log" >&2; exit 1; }
  sleep 0.1
done
curl -fsS "$hs/_matrix/client/versions" >/dev/null

register secgpt "$BOT_PASSWORD"
register you "$YOU_PASSWORD"

config="$dir/config.yaml"
provider=simulator
[ -n "${SECGPT_LLM_BASE_URL:-}${OPENAI_API_KEY:-}" ] && provider=openai
cat > "$config" <<EOF
# Written by scripts/dev.sh on every run; see config.example.yaml.
llm:
  provider: $provider
  base_url: ${SECGPT_LLM_BASE_URL:-https://api.openai.com/v1}
  api_key_env: OPENAI_API_KEY
  models:
    planner: ${SECGPT_LLM_MODEL:-gpt-4o-mini}
    spoke: ${SECGPT_LLM_MODEL:-gpt-4o-mini}
    vanilla: ${SECGPT_LLM_MODEL:-gpt-4o-mini}
database: $dir/secgpt.db
logging:
  level: info
  format: console
bot:
  homeserver: $hs
  user_id: "@secgpt:localhost"
  password_env: SECGPT_MATRIX_PASSWORD
  allow: ["@*:localhost"]
EOF

# `make dev` has just built it; run directly, the script builds it if missing.
[ -x "$repo/bin/secgpt" ] || make -C "$repo" build

botlog="$dir/bot.log"
cat <<EOF

  secgpt on a local Matrix homeserver
  -----------------------------------
  Homeserver:  $hs   (loopback only, federation off)
  Your login:  you   password: $YOU_PASSWORD
  The bot:     @secgpt:localhost

  A client: Element Desktop (element.io/download): on the sign-in screen
  choose "Edit" beside the homeserver, enter $hs, and sign
  in as "you". Any client that lets you type a homeserver URL is pointed
  at it the same way (Element Web, Cinny, gomuks, nheko...).
  Start a direct chat with @secgpt:localhost (it joins at once) and ask,
  e.g.:
    Use metro_hail to estimate the fare from 'Main Street' to 'Elm Avenue'.
  Answer the permission prompt with a reaction; type !help for commands.

  A second user, for a shared room (registration is off):
    scripts/dev.sh user bob        (in another terminal, while this runs)

  Logs:  bot       $botlog
         Dendrite  $hsdir/dendrite.log
  Model: $provider.  Data: $dir.  Ctrl-C stops the bot and Dendrite.

EOF
start=0
[ -f "$botlog" ] && start=$(wc -c <"$botlog")
SECGPT_MATRIX_PASSWORD=$BOT_PASSWORD "$repo/bin/secgpt" bot --config "$config" >>"$botlog" 2>&1 &
bot_pid=$!
trap 'kill "$bot_pid" "$dendrite_pid" 2>/dev/null; wait "$bot_pid" "$dendrite_pid" 2>/dev/null || true' EXIT
until tail -c +"$((start + 1))" "$botlog" | grep -q "Bot started"; do
  if ! kill -0 "$bot_pid" 2>/dev/null; then
    echo "The bot stopped at start. The end of $botlog:" >&2
    tail -n 15 "$botlog" >&2
    exit 1
  fi
  sleep 0.2
done
echo "  $(date +%H:%M:%S) The bot is up."
status=0
wait "$bot_pid" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 130 ] && [ "$status" -ne 143 ]; then
  echo "The bot stopped (exit $status). The end of $botlog:" >&2
  tail -n 15 "$botlog" >&2
  exit "$status"
fi
