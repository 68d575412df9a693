package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/llm/simulator"
	"github.com/secgpt/secgpt/sandbox"
)

// Config is the operator's configuration. config.example.yaml at the
// repository root documents every field.
type Config struct {
	LLM       LLMConfig       `yaml:"llm"`
	Database  string          `yaml:"database"`
	Apps      AppsConfig      `yaml:"apps"`
	Consent   ConsentConfig   `yaml:"consent"`
	Deadlines DeadlinesConfig `yaml:"deadlines"`
	Sessions  SessionsConfig  `yaml:"sessions"`
	Spokes    SpokesConfig    `yaml:"spokes"`
	Budgets   BudgetsConfig   `yaml:"budgets"`
	Sandbox   SandboxConfig   `yaml:"sandbox"`
	Logging   LoggingConfig   `yaml:"logging"`
	Bot       BotConfig       `yaml:"bot"`

	// runsBot is set by `secgpt bot`, the only command that needs Bot.
	runsBot bool
}

type LLMConfig struct {
	Provider string `yaml:"provider"`
	// The default endpoint: every model that names no other.
	EndpointConfig `yaml:",inline"`
	Models         ModelsConfig `yaml:"models"`
	// Endpoints are further endpoints, by name, that models may name.
	Endpoints map[string]EndpointConfig `yaml:"endpoints"`
	Simulator SimulatorConfig           `yaml:"simulator"`
}

// EndpointConfig is one OpenAI-compatible endpoint. In llm.endpoints, an
// absent timeout or structured_output is the default endpoint's.
type EndpointConfig struct {
	BaseURL          string        `yaml:"base_url"`
	APIKeyEnv        string        `yaml:"api_key_env"`
	Timeout          time.Duration `yaml:"timeout"`
	StructuredOutput string        `yaml:"structured_output"`
}

type ModelsConfig struct {
	Planner ModelRef            `yaml:"planner"`
	Spoke   ModelRef            `yaml:"spoke"`
	Vanilla ModelRef            `yaml:"vanilla"`
	Apps    map[string]ModelRef `yaml:"apps"`
}

// ModelRef names a model: by its name alone on the default endpoint, or as
// {endpoint: NAME, model: MODEL} on one of llm.endpoints.
type ModelRef struct {
	Endpoint string `yaml:"endpoint"`
	Model    string `yaml:"model"`
}

// UnmarshalYAML reads a model name or an {endpoint, model} mapping.
func (m *ModelRef) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*m = ModelRef{Model: n.Value}
		return nil
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i].Value; k != "endpoint" && k != "model" {
				return fmt.Errorf("line %d: unknown field %q in a model (it has endpoint and model)", n.Content[i].Line, k)
			}
		}
		type plain ModelRef
		var r plain
		if err := n.Decode(&r); err != nil {
			return err
		}
		*m = ModelRef(r)
		return nil
	default:
		return fmt.Errorf("line %d: a model is a name, or endpoint and model", n.Line)
	}
}

// key is the name under which the hub asks for the model: its name on the
// default endpoint, NAME@ENDPOINT on another (the router strips it).
func (m ModelRef) key() string {
	if m.Endpoint == "" {
		return m.Model
	}
	return m.Model + "@" + m.Endpoint
}

type SimulatorConfig struct {
	Latency time.Duration `yaml:"latency"`
	// Profile makes the simulated model answer as a real server does
	// (simulator.ProfileNames); empty is OpenAI's API as documented.
	Profile string `yaml:"profile"`
}

type AppsConfig struct {
	Installed []string `yaml:"installed"`
	// External are MCP servers installed as apps (see external.go).
	External []ExternalApp `yaml:"external"`
}

type ConsentConfig struct {
	OutOfPlan string        `yaml:"out_of_plan"`
	Timeout   time.Duration `yaml:"timeout"`
}

type DeadlinesConfig struct {
	Request    time.Duration `yaml:"request"`
	Step       time.Duration `yaml:"step"`
	SpokeStart time.Duration `yaml:"spoke_start"`
}

type SessionsConfig struct {
	IdleTimeout time.Duration `yaml:"idle_timeout"`
}

type SpokesConfig struct {
	// Binary is the spoke binary; empty: secgpt-spoke beside secgpt.
	Binary             string        `yaml:"binary"`
	IdleTimeout        time.Duration `yaml:"idle_timeout"`
	MaxFrameBytes      int           `yaml:"max_frame_bytes"`
	MaxFramesPerSecond int           `yaml:"max_frames_per_second"`
	ScratchDir         string        `yaml:"scratch_dir"`
	Spares             int           `yaml:"spares"`
	MaxSpares          int           `yaml:"max_spares"`
	Disk               DiskConfig    `yaml:"disk"`
}

// DiskConfig says how long scratch directories live and what they may
// take of the disk that holds them. Each scratch's own bound is a limit
// (LimitsConfig.DiskBytes and DiskFiles).
type DiskConfig struct {
	// MaxIdle is how long a scratch directory may go unused before it is
	// removed (at start and then periodically, never while a spoke of
	// its (user, app) runs); 0 keeps them.
	MaxIdle time.Duration `yaml:"max_idle"`
	// ReserveBytes must stay free on the scratch disk: no new scratch of
	// an app that keeps data is made that would leave less, so a full
	// scratch never starves what shares the disk.
	ReserveBytes uint64 `yaml:"reserve_bytes"`
}

type BudgetsConfig struct {
	MaxQueryBytes       int `yaml:"max_query_bytes"`
	MaxPlanSteps        int `yaml:"max_plan_steps"`
	MaxLLMCallsPerStep  int `yaml:"max_llm_calls_per_step"`
	MaxLLMCallsPerQuery int `yaml:"max_llm_calls_per_query"`
	MaxPromptBytes      int `yaml:"max_prompt_bytes"`
	HistoryEntries      int `yaml:"history_entries"`
	MemoryEntries       int `yaml:"memory_entries"`

	// Model tokens per request, per user per UTC day, and per app per user
	// per UTC day (see hub.Budgets).
	TokensPerQuery   int64 `yaml:"tokens_per_query"`
	TokensPerUserDay int64 `yaml:"tokens_per_user_day"`
	TokensPerAppDay  int64 `yaml:"tokens_per_app_day"`
	// The hub's own time serving one step of a spoke.
	HubTimePerStep time.Duration `yaml:"hub_time_per_step"`
	// What each app may store for each user.
	DataBytesPerApp int64 `yaml:"data_bytes_per_app"`
	DataDocsPerApp  int64 `yaml:"data_docs_per_app"`
}

type SandboxConfig struct {
	// The limits for every spoke; Profiles overrides them per profile
	// ("strict": built-in apps; "exec": external apps' servers), then
	// Apps per app.
	LimitsConfig `yaml:",inline"`
	Profiles     map[string]LimitsConfig `yaml:"profiles"`
	Apps         map[string]LimitsConfig `yaml:"apps"`
	Namespaces   bool                    `yaml:"namespaces"`
	// AllowWeaker is the operator's explicit opt-out: run apps even when the
	// kernel lacks seccomp or Landlock. Logged loudly.
	AllowWeaker bool `yaml:"allow_weaker_sandbox"`
	// SpokeIDs are the host uids and gids a root hub gives its spokes, one
	// per live spoke; zero keeps sandbox.DefaultIDRange.
	SpokeIDs IDRangeConfig `yaml:"spoke_ids"`
}

// IDRangeConfig is a range of host ids: First, First+1, …, First+Count-1.
type IDRangeConfig struct {
	First uint32 `yaml:"first"`
	Count uint32 `yaml:"count"`
}

// LimitsConfig are a spoke's resource limits; 0 keeps the default.
type LimitsConfig struct {
	CPUSeconds        uint64 `yaml:"cpu_seconds"`
	AddressSpaceBytes uint64 `yaml:"address_space_bytes"`
	FileSizeBytes     uint64 `yaml:"file_size_bytes"`
	OpenFiles         uint64 `yaml:"open_files"`
	// MemoryBytes bounds the memory of the app's spoke and its server
	// (a cgroup per spoke, where the machine offers cgroups).
	MemoryBytes uint64 `yaml:"memory_bytes"`
	// Tasks bounds the processes and threads of the spoke and its server.
	Tasks uint64 `yaml:"tasks"`
	// CPUWeight is the spoke's share of the processors against other
	// spokes, 1 to 10000 (100 is an equal share); CPUPercent caps its
	// processor time in percent of one processor; SwapBytes is the swap
	// it may use beyond MemoryBytes (default none). All through the
	// spoke's cgroup.
	CPUWeight  uint64 `yaml:"cpu_weight"`
	CPUPercent uint64 `yaml:"cpu_percent"`
	SwapBytes  uint64 `yaml:"swap_bytes"`
	// DiskBytes and DiskFiles bound the app's scratch directory of each
	// user: a tmpfs per spoke, or for an app that keeps data a filesystem
	// image per (user, app) (a checked quota where the hub is not root).
	DiskBytes uint64 `yaml:"disk_bytes"`
	DiskFiles uint64 `yaml:"disk_files"`
}

// limitProfiles are the profiles that sandbox.profiles may name: the one
// of built-in apps and the one of external apps' servers.
var limitProfiles = []sandbox.Profile{sandbox.ProfileStrict, sandbox.ProfileExec}

type LoggingConfig struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// ollamaLoadTimeout is how long Ollama lets a model load before it fails
// the request (envconfig OLLAMA_LOAD_TIMEOUT, 5 minutes): a model call
// must be allowed that long, or the first call after a model was unloaded
// fails while the model is still loading.
const ollamaLoadTimeout = 5 * time.Minute

// defaultConfig is what runs with no config file: the SQLite default and an
// OpenAI-compatible endpoint from the environment, or the simulator.
func defaultConfig() Config {
	dataDir := os.Getenv("XDG_DATA_HOME")
	if dataDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		dataDir = filepath.Join(home, ".local", "share")
	}
	dataDir = filepath.Join(dataDir, "secgpt")
	// Spokes run as an unprivileged uid when the hub is root, and must be
	// able to pass through to their scratch: not under root's home.
	scratch := filepath.Join(dataDir, "scratch")
	if os.Geteuid() == 0 {
		scratch = "/var/lib/secgpt/scratch"
	}
	var installed []string
	for _, a := range apps.Builtin() {
		installed = append(installed, a.Spec().Name)
	}
	gpt := ModelRef{Model: "gpt-4o-mini"}
	return Config{
		LLM: LLMConfig{
			Provider: "openai",
			EndpointConfig: EndpointConfig{
				BaseURL:   "https://api.openai.com/v1",
				APIKeyEnv: "OPENAI_API_KEY",
				// A local server loads a model on its first call, which
				// takes minutes for a large one; Ollama gives a load up
				// to 5 minutes (OLLAMA_LOAD_TIMEOUT) before it fails it.
				Timeout:          ollamaLoadTimeout,
				StructuredOutput: "auto",
			},
			Models: ModelsConfig{Planner: gpt, Spoke: gpt, Vanilla: gpt},
		},
		Database:  filepath.Join(dataDir, "secgpt.db"),
		Apps:      AppsConfig{Installed: installed},
		Consent:   ConsentConfig{OutOfPlan: "ask", Timeout: 5 * time.Minute},
		Deadlines: DeadlinesConfig{Request: 15 * time.Minute, Step: 2 * time.Minute, SpokeStart: 5 * time.Second},
		Sessions:  SessionsConfig{IdleTimeout: time.Hour},
		Spokes: SpokesConfig{
			IdleTimeout: 10 * time.Minute, MaxFrameBytes: 1 << 20, MaxFramesPerSecond: 500,
			ScratchDir: scratch, Spares: 2, MaxSpares: 128,
			Disk: DiskConfig{MaxIdle: 30 * 24 * time.Hour, ReserveBytes: 1 << 30},
		},
		Budgets: BudgetsConfig{
			MaxQueryBytes: 8 << 10, MaxPlanSteps: 16, MaxLLMCallsPerStep: 8, MaxLLMCallsPerQuery: 32,
			MaxPromptBytes: 512 << 10, HistoryEntries: 20, MemoryEntries: 20,
			TokensPerQuery: 250_000, TokensPerUserDay: 2_000_000, TokensPerAppDay: 1_000_000,
			HubTimePerStep: 2 * time.Second, DataBytesPerApp: 16 << 20, DataDocsPerApp: 10_000,
		},
		// New namespaces where the kernel allows them, as the example
		// config says: the strongest confinement is the default.
		Sandbox: SandboxConfig{Namespaces: true},
		Logging: LoggingConfig{Level: "warn", Format: "console"},
		Bot:     defaultBotConfig(),
	}
}

// applyEnvironment fills the endpoint from the environment when no config
// file chose one: SECGPT_LLM_BASE_URL or OPENAI_BASE_URL, else the
// simulator unless an OpenAI key is set. It returns a note for the user.
func (c *Config) applyEnvironment() string {
	for _, v := range []string{"SECGPT_LLM_BASE_URL", "OPENAI_BASE_URL"} {
		if u := os.Getenv(v); u != "" {
			c.LLM.BaseURL = u
			if m := os.Getenv("SECGPT_LLM_MODEL"); m != "" {
				ref := ModelRef{Model: m}
				c.LLM.Models = ModelsConfig{Planner: ref, Spoke: ref, Vanilla: ref}
			}
			return fmt.Sprintf("Using the model endpoint %s from $%s.", u, v)
		}
	}
	if os.Getenv(c.LLM.APIKeyEnv) != "" {
		return fmt.Sprintf("Using %s with the key from $%s.", c.LLM.BaseURL, c.LLM.APIKeyEnv)
	}
	c.LLM.Provider = "simulator"
	return "No model endpoint is configured (set SECGPT_LLM_BASE_URL or OPENAI_API_KEY): using the built-in simulated model, which obeys every instruction it reads."
}

// loadConfig reads a YAML config over the defaults. Unknown fields are errors.
func loadConfig(path string) (Config, error) {
	cfg := defaultConfig()
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("failed to read config: %w", err)
	}
	if err := decodeConfig(bytes.NewReader(b), &cfg); err != nil {
		return Config{}, err
	}
	cfg.Database = expandHome(cfg.Database)
	cfg.Spokes.ScratchDir = expandHome(cfg.Spokes.ScratchDir)
	cfg.Spokes.Binary = expandHome(cfg.Spokes.Binary)
	return cfg, nil
}

// expandHome replaces a leading "~/" with the user's home directory.
func expandHome(path string) string {
	rest, ok := strings.CutPrefix(path, "~/")
	if !ok {
		return path
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return path
	}
	return filepath.Join(home, rest)
}

var yamlFieldError = regexp.MustCompile(`line (\d+): field (\S+) not found in type main\.(\w+)`)

func decodeConfig(r io.Reader, cfg *Config) error {
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		msg := err.Error()
		if m := yamlFieldError.FindStringSubmatch(msg); m != nil {
			section := strings.TrimSuffix(strings.ToLower(m[3]), "config")
			return fmt.Errorf("config: line %s: unknown field %q in %s", m[1], m[2], section)
		}
		msg = strings.TrimPrefix(msg, "yaml: ")
		msg = strings.ReplaceAll(msg, "\n", "; ")
		return fmt.Errorf("config: %s", msg)
	}
	return nil
}

// validate checks every field and returns the first problem as one line
// naming the field.
func (c *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("config: %s: %s", field, fmt.Sprintf(format, args...))
	}
	if err := c.LLM.validate(); err != nil {
		return err
	}
	if c.Database == "" {
		return bad("database", "is required")
	}
	if len(c.Apps.Installed) == 0 && len(c.Apps.External) == 0 {
		return bad("apps.installed", "must list at least one app, or apps.external declare one")
	}
	seen := map[string]bool{}
	for i, name := range c.Apps.Installed {
		if _, ok := apps.Lookup(name); !ok {
			return bad(fmt.Sprintf("apps.installed[%d]", i), "no built-in app named %q", name)
		}
		if seen[name] {
			return bad(fmt.Sprintf("apps.installed[%d]", i), "%q is listed twice", name)
		}
		seen[name] = true
	}
	if err := c.Apps.validateExternal(seen); err != nil {
		return err
	}
	for _, app := range sortedNames(c.LLM.Models.Apps) {
		if !seen[app] {
			return bad("llm.models.apps."+app, "names an app that is not installed")
		}
		if err := c.LLM.validateModel("llm.models.apps."+app, c.LLM.Models.Apps[app]); err != nil {
			return err
		}
	}
	if err := c.Sandbox.LimitsConfig.validate("sandbox"); err != nil {
		return err
	}
	for _, profile := range sortedNames(c.Sandbox.Profiles) {
		if !slices.Contains(limitProfiles, sandbox.Profile(profile)) {
			return bad("sandbox.profiles."+profile, "is not a profile: strict (built-in apps) or exec (external apps)")
		}
		if err := c.Sandbox.Profiles[profile].validate("sandbox.profiles." + profile); err != nil {
			return err
		}
	}
	for _, app := range sortedNames(c.Sandbox.Apps) {
		if !seen[app] {
			return bad("sandbox.apps."+app, "names an app that is not installed")
		}
		if err := c.Sandbox.Apps[app].validate("sandbox.apps." + app); err != nil {
			return err
		}
	}
	switch c.Consent.OutOfPlan {
	case "ask", "deny":
	default:
		return bad("consent.out_of_plan", "must be ask or deny, not %q", c.Consent.OutOfPlan)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"consent.timeout", c.Consent.Timeout}, {"deadlines.request", c.Deadlines.Request}, {"deadlines.step", c.Deadlines.Step},
		{"deadlines.spoke_start", c.Deadlines.SpokeStart}, {"sessions.idle_timeout", c.Sessions.IdleTimeout},
		{"spokes.idle_timeout", c.Spokes.IdleTimeout},
	} {
		if d.v <= 0 {
			return bad(d.field, "must be a positive duration")
		}
	}
	if c.Spokes.MaxFrameBytes < 4<<10 || c.Spokes.MaxFrameBytes > 64<<20 {
		return bad("spokes.max_frame_bytes", "must be between 4096 and 67108864")
	}
	if c.Spokes.MaxFramesPerSecond <= 0 {
		return bad("spokes.max_frames_per_second", "must be positive")
	}
	if c.Spokes.ScratchDir == "" {
		return bad("spokes.scratch_dir", "is required")
	}
	if c.Spokes.Spares < 0 || c.Spokes.Spares > 16 {
		return bad("spokes.spares", "must be between 0 and 16")
	}
	if c.Spokes.MaxSpares < 0 || c.Spokes.MaxSpares > 1024 {
		return bad("spokes.max_spares", "must be between 0 and 1024")
	}
	if c.Spokes.Disk.MaxIdle < 0 {
		return bad("spokes.disk.max_idle", "must be 0 (keep scratch) or positive")
	}
	if rel, err := filepath.Rel(filepath.Clean(c.Spokes.ScratchDir), filepath.Clean(c.Database)); err == nil && !strings.HasPrefix(rel, "..") {
		return bad("spokes.scratch_dir", "holds the database: apps' scratch and the database must be on different paths, so that apps never reach the database and a full scratch never stops it")
	}
	for _, n := range []struct {
		field string
		v     int
	}{
		{"budgets.max_query_bytes", c.Budgets.MaxQueryBytes}, {"budgets.max_plan_steps", c.Budgets.MaxPlanSteps},
		{"budgets.max_llm_calls_per_step", c.Budgets.MaxLLMCallsPerStep}, {"budgets.max_llm_calls_per_query", c.Budgets.MaxLLMCallsPerQuery},
		{"budgets.max_prompt_bytes", c.Budgets.MaxPromptBytes}, {"budgets.history_entries", c.Budgets.HistoryEntries},
		{"budgets.memory_entries", c.Budgets.MemoryEntries},
	} {
		if n.v <= 0 {
			return bad(n.field, "must be positive")
		}
	}
	for _, n := range []struct {
		field string
		v     int64
	}{
		{"budgets.tokens_per_query", c.Budgets.TokensPerQuery}, {"budgets.tokens_per_user_day", c.Budgets.TokensPerUserDay},
		{"budgets.tokens_per_app_day", c.Budgets.TokensPerAppDay}, {"budgets.hub_time_per_step", int64(c.Budgets.HubTimePerStep)},
		{"budgets.data_bytes_per_app", c.Budgets.DataBytesPerApp}, {"budgets.data_docs_per_app", c.Budgets.DataDocsPerApp},
	} {
		if n.v <= 0 {
			return bad(n.field, "must be positive")
		}
	}
	switch c.Logging.Level {
	case "trace", "debug", "info", "warn", "error":
	default:
		return bad("logging.level", "must be trace, debug, info, warn or error, not %q", c.Logging.Level)
	}
	switch c.Logging.Format {
	case "console", "json":
	default:
		return bad("logging.format", "must be console or json, not %q", c.Logging.Format)
	}
	if c.runsBot {
		return c.Bot.validate()
	}
	return nil
}

// validate checks the llm section but for the models of apps, which need
// the installed apps.
func (l *LLMConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("config: %s: %s", field, fmt.Sprintf(format, args...))
	}
	switch l.Provider {
	case "openai", "simulator":
	default:
		return bad("llm.provider", "must be openai or simulator, not %q", l.Provider)
	}
	if l.Provider == "openai" {
		if err := l.EndpointConfig.validate("llm", false); err != nil {
			return err
		}
	} else if err := l.EndpointConfig.validate("llm", true); err != nil {
		return err
	}
	if l.Timeout <= 0 {
		return bad("llm.timeout", "must be a positive duration such as 5m")
	}
	if l.StructuredOutput == "" {
		return bad("llm.structured_output", "must be auto, on or off, not %q", l.StructuredOutput)
	}
	for _, name := range sortedNames(l.Endpoints) {
		if name == "" || strings.ContainsAny(name, "@ \t") {
			return bad("llm.endpoints", "%q is not a usable endpoint name", name)
		}
		if err := l.Endpoints[name].validate("llm.endpoints."+name, false); err != nil {
			return err
		}
	}
	for _, m := range []struct {
		field string
		ref   ModelRef
	}{{"llm.models.planner", l.Models.Planner}, {"llm.models.spoke", l.Models.Spoke}, {"llm.models.vanilla", l.Models.Vanilla}} {
		if err := l.validateModel(m.field, m.ref); err != nil {
			return err
		}
	}
	if l.Simulator.Latency < 0 {
		return bad("llm.simulator.latency", "must not be negative")
	}
	if _, ok := simulator.LookupProfile(l.Simulator.Profile); l.Simulator.Profile != "" && !ok {
		return bad("llm.simulator.profile", "must be one of %s, not %q", strings.Join(simulator.ProfileNames(), ", "), l.Simulator.Profile)
	}
	return nil
}

// validateModel checks a model reference: a name, on a known endpoint.
func (l *LLMConfig) validateModel(field string, m ModelRef) error {
	if m.Model == "" && l.Provider == "openai" {
		return fmt.Errorf("config: %s: is required", field)
	}
	if _, ok := l.Endpoints[m.Endpoint]; m.Endpoint != "" && !ok {
		return fmt.Errorf("config: %s.endpoint: no endpoint named %q in llm.endpoints", field, m.Endpoint)
	}
	return nil
}

// validate checks an endpoint; a simulated one needs no URL.
func (e EndpointConfig) validate(prefix string, simulated bool) error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("config: %s.%s: %s", prefix, field, fmt.Sprintf(format, args...))
	}
	if !simulated {
		u, err := url.Parse(e.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("base_url", "must be an http or https URL, not %q", e.BaseURL)
		}
	}
	if e.APIKeyEnv != "" && !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(e.APIKeyEnv) {
		return bad("api_key_env", "must name an environment variable (the key itself never goes in the file)")
	}
	if e.Timeout < 0 {
		return bad("timeout", "must not be negative")
	}
	switch e.StructuredOutput {
	case "", "auto", "on", "off":
	default:
		return bad("structured_output", "must be auto, on or off, not %q", e.StructuredOutput)
	}
	return nil
}

func (l LimitsConfig) validate(prefix string) error {
	if l.AddressSpaceBytes != 0 && l.AddressSpaceBytes < sandbox.MinAddressSpace {
		return fmt.Errorf("config: %s.address_space_bytes: must be 0 (the default) or at least %d: the Go runtime of a spoke needs it", prefix, uint64(sandbox.MinAddressSpace))
	}
	if l.MemoryBytes != 0 && l.MemoryBytes < sandbox.MinMemory {
		return fmt.Errorf("config: %s.memory_bytes: must be 0 (the default) or at least %d", prefix, uint64(sandbox.MinMemory))
	}
	if l.Tasks != 0 && l.Tasks < sandbox.MinTasks {
		return fmt.Errorf("config: %s.tasks: must be 0 (the default) or at least %d", prefix, sandbox.MinTasks)
	}
	if l.CPUWeight > sandbox.MaxCPUWeight {
		return fmt.Errorf("config: %s.cpu_weight: must be 0 (the default) to %d", prefix, sandbox.MaxCPUWeight)
	}
	if l.CPUPercent != 0 && l.CPUPercent < sandbox.MinCPUPercent {
		return fmt.Errorf("config: %s.cpu_percent: must be 0 (the default) or at least %d", prefix, sandbox.MinCPUPercent)
	}
	if l.DiskBytes != 0 && l.DiskBytes < sandbox.MinDiskBytes {
		return fmt.Errorf("config: %s.disk_bytes: must be 0 (the default) or at least %d", prefix, sandbox.MinDiskBytes)
	}
	if l.DiskFiles != 0 && l.DiskFiles < sandbox.MinDiskFiles {
		return fmt.Errorf("config: %s.disk_files: must be 0 (the default) or at least %d", prefix, sandbox.MinDiskFiles)
	}
	return nil
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// apiKey reads the endpoint's key from the environment.
func (e EndpointConfig) apiKey() string {
	if e.APIKeyEnv == "" {
		return ""
	}
	return os.Getenv(e.APIKeyEnv)
}
