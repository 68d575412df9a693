package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"maunium.net/go/mautrix/id"

	"github.com/secgpt/secgpt/bot"
)

// runBot runs the Matrix bot until ctx ends (SIGINT or SIGTERM).
func runBot(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("bot", stderr)
	configPath := fs.String("config", "", "config file with a bot section (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *configPath == "" {
		return &usageError{msg: "bot: --config is required (its bot section names the homeserver and the account)"}
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return &configError{err: err}
	}
	if err := cfg.validateForBot(); err != nil {
		return &configError{err: err}
	}
	secrets, err := cfg.Bot.secrets()
	if err != nil {
		return &configError{err: err}
	}
	if err := checkScratch(cfg); err != nil {
		return err
	}
	log := newLogger(cfg.Logging, stderr)
	if err := checkSandbox(cfg, stderr, log); err != nil {
		return &startupError{err: err}
	}
	sys, err := openSystem(ctx, cfg, log)
	if err != nil {
		return &startupError{err: err}
	}
	defer sys.Close()
	b, err := bot.New(ctx, bot.Options{
		Homeserver:      cfg.Bot.Homeserver,
		UserID:          id.UserID(cfg.Bot.UserID),
		Password:        secrets.password,
		AccessToken:     secrets.accessToken,
		PickleKey:       secrets.pickleKey,
		DeviceName:      cfg.Bot.DeviceName,
		DisplayName:     cfg.Bot.DisplayName,
		Allow:           cfg.Bot.Allow,
		Prefix:          cfg.Bot.Prefix,
		RoomPrefixes:    cfg.Bot.roomPrefixes(),
		RateMessages:    cfg.Bot.RateLimit.Messages,
		RateWindow:      cfg.Bot.RateLimit.Per,
		MaxQueued:       cfg.Bot.MaxQueued,
		MaxMessageBytes: cfg.Bot.MaxMessage,
		ConsentSettle:   cfg.Bot.ConsentSettle,
		Store:           sys.store,
		Hub:             sys.hub,
		Log:             log.With().Str("component", "bot").Logger(),
	})
	if err != nil {
		return &startupError{err: err}
	}
	fmt.Fprintf(stderr, "secgpt bot: %s on %s, %d apps installed; stop with Ctrl-C\n", cfg.Bot.UserID, cfg.Bot.Homeserver, len(sys.hub.Apps()))
	if cfg.LLM.Provider == "openai" {
		// The start-up check, beside the bot: it also loads each model,
		// so that the first request does not wait for that.
		go func() {
			var report strings.Builder
			report.WriteString("secgpt bot: model check (secgpt doctor runs it alone)\n")
			if !checkModels(ctx, cfg, sys.models, &report) {
				log.Warn().Msg("A model endpoint is not set up for secgpt; see the model check")
			}
			fmt.Fprint(stderr, report.String())
		}()
	}
	if err := b.Run(ctx); err != nil {
		return fmt.Errorf("bot: %w", err)
	}
	return nil
}
