#!/usr/bin/env bash
# Runs secgpt's Matrix bot against a local Dendrite homeserver, in one
# command (`make dev`): builds Dendrite once (cached outside the repository),
# starts it on 127.0.0.1 only with federation off, registers the bot
# (@secgpt:localhost) and a user (@you:localhost), writes the bot's config,
# prints how to log in, and runs the bot in the foreground. Ctrl-C stops
# the bot and Dendrite.
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

register() { # user password; an existing account is fine
  out=$("$dendrite_bin/create-account" -config dendrite.yaml -url "$hs" -username "$1" -passwordstdin <<<"$2" 2>&1) ||
    grep -qiE 'already (exists|taken)|in use' <<<"$out" || { echo "$out" >&2; exit 1; }
}
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
bot:
  homeserver: $hs
  user_id: "@secgpt:localhost"
  password_env: SECGPT_MATRIX_PASSWORD
  allow: ["@*:localhost"]
EOF

# `make dev` has just built it; run directly, the script builds it if missing.
[ -x "$repo/bin/secgpt" ] || make -C "$repo" build

cat <<EOF

  secgpt on a local Matrix homeserver
  -----------------------------------
  Homeserver:  $hs   (loopback only, federation off)
  Your login:  you   password: $YOU_PASSWORD
  The bot:     @secgpt:localhost

  In any Matrix client (Element Desktop, Element Web, Cinny, gomuks...):
  sign in to $hs as "you", start a direct chat with @secgpt:localhost
  (it joins at once), and ask, e.g.:
    Use metro_hail to estimate the fare from 'Main Street' to 'Elm Avenue'.
  Answer the permission prompt with a reaction; type !help for commands.

  Model: $provider.  Data: $dir.  Ctrl-C stops the bot and Dendrite.

EOF
SECGPT_MATRIX_PASSWORD=$BOT_PASSWORD "$repo/bin/secgpt" bot --config "$config"
