package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodBot = `bot:
  homeserver: https://matrix.example.org
  user_id: "@secgpt:example.org"
  allow: ["@*:example.org"]
`

func TestBotConfigErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"no bot section", "", "bot.homeserver: is required"},
		{"bad homeserver", strings.Replace(goodBot, "https://matrix.example.org", "matrix.example.org", 1), "bot.homeserver: must be an http or https URL"},
		{"no user", strings.Replace(goodBot, `"@secgpt:example.org"`, `""`, 1), "bot.user_id: is required"},
		{"bad user", strings.Replace(goodBot, `"@secgpt:example.org"`, `"secgpt"`, 1), "bot.user_id: must be a Matrix user ID"},
		{"password in the file", goodBot + "  password_env: hunter2!\n", "bot.password_env: must name an environment variable"},
		{"no secret named", goodBot + "  password_env: \"\"\n  access_token_env: \"\"\n", "bot.password_env: or bot.access_token_env must name"},
		{"nobody allowed", strings.Replace(goodBot, `["@*:example.org"]`, "[]", 1), "bot.allow: must list at least one"},
		{"bad pattern", strings.Replace(goodBot, `["@*:example.org"]`, `["*"]`, 1), "bot.allow: allow pattern 0"},
		{"prefix with space", goodBot + "  prefix: \"! \"\n", "bot.prefix: must not contain white space"},
		{"bad room", goodBot + "  rooms:\n    general: {prefix: \"?\"}\n", `bot.rooms: "general" is not a room ID`},
		{"empty room prefix", goodBot + "  rooms:\n    \"!a:example.org\": {prefix: \"\"}\n", "bot.rooms.!a:example.org.prefix: must not be empty"},
		{"zero rate", goodBot + "  rate_limit: {messages: 0, per: 1m}\n", "bot.rate_limit.messages: must be positive"},
		{"no queue", goodBot + "  max_queued: 0\n", "bot.max_queued: must be positive"},
		{"huge messages", goodBot + "  max_message_bytes: 100000\n", "bot.max_message_bytes: must be between"},
		{"long settle", goodBot + "  consent_settle: 5m\n", "bot.consent_settle: must be a duration between"},
		{"settle not before the deadline", "consent: {timeout: 30s}\n" + goodBot + "  consent_settle: 30s\n", "bot.consent_settle: must be shorter than consent.timeout (30s), not 30s"},
		{"unknown field", goodBot + "  homesever: x\n", `unknown field "homesever" in bot`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := loadConfig(path)
			if err == nil {
				err = cfg.validateForBot()
			}
			if err == nil {
				t.Fatal("config accepted")
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Fatalf("error = %q, want one line containing %q", msg, tt.want)
			}
		})
	}
}

func TestBotSectionOnlyForTheBot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("bot:\n  allow: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := configFor(path); err != nil {
		t.Errorf("a command other than bot required the bot section: %v", err)
	}
	if err := os.WriteFile(path, []byte(goodBot), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.validateForBot(); err != nil {
		t.Errorf("a good bot section was refused: %v", err)
	}
}

func TestBotSecretsFromTheEnvironment(t *testing.T) {
	c := defaultBotConfig()
	t.Setenv(c.PasswordEnv, "")
	t.Setenv(c.AccessTokenEnv, "")
	if _, err := c.secrets(); err == nil || !strings.Contains(err.Error(), "set the bot's password in $SECGPT_MATRIX_PASSWORD") {
		t.Errorf("no secret: %v", err)
	}
	t.Setenv(c.PasswordEnv, "pw")
	t.Setenv(c.AccessTokenEnv, "token")
	if _, err := c.secrets(); err == nil || !strings.Contains(err.Error(), "set only one") {
		t.Errorf("both secrets: %v", err)
	}
	t.Setenv(c.AccessTokenEnv, "")
	s, err := c.secrets()
	if err != nil || s.password != "pw" || s.accessToken != "" || s.pickleKey != nil {
		t.Errorf("password only: %+v, %v", s, err)
	}
	c.PickleKeyEnv = "SECGPT_TEST_PICKLE"
	t.Setenv("SECGPT_TEST_PICKLE", "short")
	if _, err := c.secrets(); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("short pickle key: %v", err)
	}
}

func TestBotCommandExitCodes(t *testing.T) {
	if r := runBinary(t, "", "bot"); r.code != exitUsage || !strings.Contains(r.stderr, "--config is required") {
		t.Errorf("bot without --config: %d %q", r.code, r.stderr)
	}
	r := runBinary(t, "", "bot", "--config", testConfig(t, ""))
	if r.code != exitConfig || !strings.Contains(r.stderr, "bot.homeserver: is required") {
		t.Errorf("bot without a bot section: %d %q", r.code, r.stderr)
	}
	t.Setenv("SECGPT_MATRIX_PASSWORD", "")
	t.Setenv("SECGPT_MATRIX_TOKEN", "")
	r = runBinary(t, "", "bot", "--config", testConfig(t, goodBot))
	if r.code != exitConfig || !strings.Contains(r.stderr, "set the bot's password") {
		t.Errorf("bot without credentials: %d %q", r.code, r.stderr)
	}
}
