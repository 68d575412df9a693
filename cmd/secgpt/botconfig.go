package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"

	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/bot"
)

// BotConfig is the Matrix front end's section (`bot:`), needed only by
// `secgpt bot`. Secrets are never in it: it names environment variables.
type BotConfig struct {
	Homeserver     string                   `yaml:"homeserver"`
	UserID         string                   `yaml:"user_id"`
	PasswordEnv    string                   `yaml:"password_env"`
	AccessTokenEnv string                   `yaml:"access_token_env"`
	PickleKeyEnv   string                   `yaml:"pickle_key_env"`
	DeviceName     string                   `yaml:"device_name"`
	DisplayName    string                   `yaml:"display_name"`
	Allow          []string                 `yaml:"allow"`
	Prefix         string                   `yaml:"prefix"`
	Rooms          map[string]BotRoomConfig `yaml:"rooms"`
	RateLimit      BotRateConfig            `yaml:"rate_limit"`
	MaxQueued      int                      `yaml:"max_queued"`
	MaxMessage     int                      `yaml:"max_message_bytes"`
	ConsentSettle  time.Duration            `yaml:"consent_settle"`
}

// BotRoomConfig overrides settings for one room.
type BotRoomConfig struct {
	Prefix string `yaml:"prefix"`
}

// BotRateConfig is each user's message rate.
type BotRateConfig struct {
	Messages int           `yaml:"messages"`
	Per      time.Duration `yaml:"per"`
}

func defaultBotConfig() BotConfig {
	return BotConfig{
		PasswordEnv:    "SECGPT_MATRIX_PASSWORD",
		AccessTokenEnv: "SECGPT_MATRIX_TOKEN",
		DeviceName:     "secgpt",
		DisplayName:    "secgpt",
		Prefix:         "!",
		RateLimit:      BotRateConfig{Messages: 10, Per: time.Minute},
		MaxQueued:      3,
		MaxMessage:     8 << 10,
		ConsentSettle:  2 * time.Second,
	}
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validate checks the section and returns the first problem as one line
// naming the field.
func (c *BotConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("config: bot.%s: %s", field, fmt.Sprintf(format, args...))
	}
	if c.Homeserver == "" {
		return bad("homeserver", "is required (the client-server API URL, e.g. https://matrix.example.org)")
	}
	if u, err := url.Parse(c.Homeserver); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("homeserver", "must be an http or https URL, not %q", c.Homeserver)
	}
	if c.UserID == "" {
		return bad("user_id", "is required (the bot's account, e.g. @secgpt:example.org)")
	}
	if _, _, err := id.UserID(c.UserID).ParseAndValidateRelaxed(); err != nil || !strings.HasPrefix(c.UserID, "@") {
		return bad("user_id", "must be a Matrix user ID like @secgpt:example.org, not %q", c.UserID)
	}
	for _, f := range []struct{ field, v string }{
		{"password_env", c.PasswordEnv}, {"access_token_env", c.AccessTokenEnv}, {"pickle_key_env", c.PickleKeyEnv},
	} {
		if f.v != "" && !envName.MatchString(f.v) {
			return bad(f.field, "must name an environment variable (the secret itself never goes in the file), not %q", f.v)
		}
	}
	if c.PasswordEnv == "" && c.AccessTokenEnv == "" {
		return bad("password_env", "or bot.access_token_env must name the environment variable holding the bot's password or access token")
	}
	if len(c.Allow) == 0 {
		return bad("allow", "must list at least one user ID pattern, e.g. \"@*:example.org\" (nobody else may invite or use the bot)")
	}
	if err := bot.CheckAllow(c.Allow); err != nil {
		return bad("allow", "%v", err)
	}
	if err := checkPrefix(c.Prefix); err != nil {
		return bad("prefix", "%v", err)
	}
	for _, room := range sortedNames(c.Rooms) {
		if !strings.HasPrefix(room, "!") || !strings.Contains(room, ":") {
			return bad("rooms", "%q is not a room ID (like !abc:example.org)", room)
		}
		if err := checkPrefix(c.Rooms[room].Prefix); err != nil {
			return bad("rooms."+room+".prefix", "%v", err)
		}
	}
	switch {
	case c.RateLimit.Messages <= 0:
		return bad("rate_limit.messages", "must be positive")
	case c.RateLimit.Per <= 0:
		return bad("rate_limit.per", "must be a positive duration such as 1m")
	case c.MaxQueued <= 0:
		return bad("max_queued", "must be positive")
	case c.MaxMessage <= 0 || c.MaxMessage > 65536:
		return bad("max_message_bytes", "must be between 1 and 65536")
	case c.ConsentSettle <= 0 || c.ConsentSettle > time.Minute:
		return bad("consent_settle", "must be a duration between 1ms and 1m")
	case c.DeviceName == "":
		return bad("device_name", "is required")
	}
	return nil
}

// validateForBot checks the whole config for `secgpt bot`: every section,
// then what ties the bot's section to the others.
func (c *Config) validateForBot() error {
	c.runsBot = true
	if err := c.validate(); err != nil {
		return err
	}
	// A reaction that counts only after the prompt's deadline can never
	// answer it.
	if c.Bot.ConsentSettle >= c.Consent.Timeout {
		return fmt.Errorf("config: bot.consent_settle: must be shorter than consent.timeout (%s), not %s", c.Consent.Timeout, c.Bot.ConsentSettle)
	}
	return nil
}

func checkPrefix(p string) error {
	switch {
	case p == "":
		return errors.New("must not be empty")
	case len(p) > 16:
		return errors.New("must be at most 16 bytes")
	case strings.IndexFunc(p, unicode.IsSpace) >= 0:
		return errors.New("must not contain white space")
	}
	return nil
}

// botSecrets are the credentials read from the environment at start.
type botSecrets struct {
	password, accessToken string
	pickleKey             []byte
}

// secrets reads the credentials from the environment: exactly one of the
// password and the access token must be set.
func (c *BotConfig) secrets() (botSecrets, error) {
	var s botSecrets
	if c.PasswordEnv != "" {
		s.password = os.Getenv(c.PasswordEnv)
	}
	if c.AccessTokenEnv != "" {
		s.accessToken = os.Getenv(c.AccessTokenEnv)
	}
	switch {
	case s.password == "" && s.accessToken == "":
		return botSecrets{}, fmt.Errorf("config: bot: set the bot's password in $%s or its access token in $%s", c.PasswordEnv, c.AccessTokenEnv)
	case s.password != "" && s.accessToken != "":
		return botSecrets{}, fmt.Errorf("config: bot: both $%s and $%s are set; set only one", c.PasswordEnv, c.AccessTokenEnv)
	}
	if c.PickleKeyEnv != "" {
		k := os.Getenv(c.PickleKeyEnv)
		if len(k) < 16 {
			return botSecrets{}, fmt.Errorf("config: bot.pickle_key_env: $%s must hold at least 16 characters", c.PickleKeyEnv)
		}
		s.pickleKey = []byte(k)
	}
	return s, nil
}

// roomPrefixes are the per-room prefixes.
func (c *BotConfig) roomPrefixes() map[id.RoomID]string {
	out := map[id.RoomID]string{}
	for room, rc := range c.Rooms {
		out[id.RoomID(room)] = rc.Prefix
	}
	return out
}
