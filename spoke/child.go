package spoke

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/secgpt/secgpt/apps"
	"github.com/secgpt/secgpt/sandbox"
)

// ChildArg is the hidden first argument by which the binary re-executes
// itself as a spoke. main dispatches on it before anything else runs.
const ChildArg = "__secgpt_spoke"

// IsChild reports whether this process was started as a spoke, as the
// launcher of an external app's server (see LaunchArg), or as the spawner
// of spokes (see SpawnerArg).
func IsChild() bool {
	return len(os.Args) > 1 && (os.Args[1] == ChildArg || os.Args[1] == LaunchArg || os.Args[1] == SpawnerArg)
}

// iscFD is the inherited ISC socket.
const iscFD = 3

// Exit codes of a spoke child.
const (
	exitOK         = 0
	exitUsage      = 64
	exitSandbox    = 70
	exitProtocol   = 71
	exitUnknownApp = 72
	exitAppFailed  = 73 // an external app's server failed; the hub was told why
)

// ChildMain runs the spoke child and returns its exit code. It confines the
// process before reading its first frame. Started as the launcher of an
// external app's server, or as the spawner, it runs that instead.
func ChildMain() int {
	if len(os.Args) > 1 && os.Args[1] == SpawnerArg {
		return spawnerMain()
	}
	// Before anything reads /proc or starts a process: a spoke in a PID
	// namespace gets its own /proc (a spare, before it waits).
	if err := sandbox.SetUpNamespaces(); err != nil {
		fmt.Fprintln(os.Stderr, "secgpt-spoke: refusing to run:", err)
		return exitSandbox
	}
	if len(os.Args) > 1 && os.Args[1] == LaunchArg {
		return launcherMain()
	}
	fs := flag.NewFlagSet("secgpt-spoke", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	appName := fs.String("app", "", "app to host; empty for a vanilla spoke")
	policyText := fs.String("policy", "", "sandbox policy")
	maxFrame := fs.Int("max-frame", DefaultMaxFrame, "ISC frame limit")
	logLevel := fs.String("log-level", "info", "log level")
	external := fs.String(ExternalArg[2:], "", "external app declaration (see External)")
	spare := fs.Bool(spareArg[2:], false, "wait for the launch arguments on fd 4")
	if len(os.Args) < 2 || fs.Parse(os.Args[2:]) != nil {
		fmt.Fprintln(os.Stderr, "secgpt-spoke: bad arguments")
		return exitUsage
	}
	var err error
	var spareBox *sandbox.Spare
	if *spare {
		// Started ahead of need (Options.Spares): the sandbox is applied
		// as far as it can be without knowing the app, then the hub says
		// what this spoke is for when a user needs it.
		if spareBox, err = enterSpare(*policyText); err != nil {
			fmt.Fprintln(os.Stderr, "secgpt-spoke: refusing to wait as a spare:", err)
			return exitSandbox
		}
		args, err := readPrivate("the launch arguments")
		if err != nil || fs.Parse(args) != nil || *external != "" {
			fmt.Fprintln(os.Stderr, "secgpt-spoke: bad launch arguments:", err)
			return exitUsage
		}
	}
	lvl, err := zerolog.ParseLevel(*logLevel)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	log := zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger()

	policy, err := sandbox.DecodePolicy(*policyText)
	if err != nil {
		log.Error().Err(err).Msg("Refusing to run without a valid sandbox policy")
		return exitSandbox
	}
	var ext *externalApp
	if *external != "" {
		// Its environment, loopback, proxy and server are set up while the
		// spoke may still read a pipe, bind and start a process.
		if ext, err = prepareExternal(*external, policy, log); err != nil {
			log.Error().Err(err).Str("app", *appName).Msg("Refusing to run the external app")
			return exitAppFailed
		}
	}
	var report sandbox.Report
	if spareBox != nil {
		report, err = spareBox.Enter(policy)
	} else {
		report, err = sandbox.Enter(policy)
	}
	if err != nil {
		log.Error().Err(err).Msg("Refusing to run: sandbox could not be applied")
		return exitSandbox
	}

	var app apps.App
	if ext != nil {
		app = ext
	} else if *appName != "" {
		a, ok := apps.Lookup(*appName)
		if !ok {
			log.Error().Str("app", *appName).Msg("Unknown app")
			return exitUnknownApp
		}
		app = a
	}

	// Non-blocking, the channel is read through the netpoller: a spoke
	// waiting for the hub parks its goroutine instead of blocking a thread
	// in read, which kept the runtime's sysmon polling (every 20 µs to
	// 10 ms) through each wait.
	if err := syscall.SetNonblock(iscFD, true); err != nil {
		log.Error().Err(err).Msg("No usable ISC channel on fd 3")
		return exitProtocol
	}
	conn := os.NewFile(iscFD, "isc")
	if conn == nil {
		log.Error().Msg("No ISC channel on fd 3")
		return exitProtocol
	}
	ch, err := newRawChannel(conn)
	if err != nil {
		log.Error().Err(err).Msg("No usable ISC channel on fd 3")
		return exitProtocol
	}
	rt := &runtime{
		app: app,
		enc: NewEncoder(ch, *maxFrame),
		dec: NewSpokeDecoder(ch, *maxFrame),
		log: log,
	}
	if ext != nil {
		ext.attach(rt)
	}
	var protections []string
	for _, p := range report.Protections {
		state := "off"
		if p.On {
			state = "on"
		}
		protections = append(protections, fmt.Sprintf("%s=%s (%s)", p.Name, state, p.Detail))
	}
	if err := rt.send(Frame{Kind: KindReady}, Ready{PID: os.Getpid(), Sandbox: protections}); err != nil {
		log.Error().Err(err).Msg("Failed to send ready")
		return exitProtocol
	}
	return rt.serve(context.Background())
}

// runtime is the child's side of the channel. Requests are serialised: an
// app may call its Env from several goroutines.
type runtime struct {
	app apps.App
	log zerolog.Logger

	mu     sync.Mutex
	enc    *Encoder
	dec    *Decoder
	nextID uint64
}

func (rt *runtime) send(f Frame, body any) error {
	if body != nil {
		b, err := jsonMarshal(body)
		if err != nil {
			return err
		}
		f.Body = b
	}
	return rt.enc.Encode(f)
}

// serve runs steps until the hub closes the channel.
func (rt *runtime) serve(ctx context.Context) int {
	for {
		f, err := rt.dec.Decode()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return exitOK
			}
			rt.log.Error().Err(err).Msg("Bad frame from hub")
			return exitProtocol
		}
		if f.Kind != KindStep {
			rt.log.Error().Str("kind", string(f.Kind)).Msg("Unexpected frame outside a step")
			return exitProtocol
		}
		var step Step
		if err := DecodeBody(f.Body, &step); err != nil {
			rt.log.Error().Err(err).Msg("Bad step from hub")
			return exitProtocol
		}
		res, fatal := rt.handleStep(ctx, step)
		if err := rt.send(Frame{Kind: KindResult, ID: f.ID}, res); err != nil {
			if errors.Is(err, ErrFrameTooLarge) {
				err = rt.send(Frame{Kind: KindResult, ID: f.ID}, Result{Error: "the result was larger than the channel allows"})
			}
			if err != nil {
				rt.log.Error().Err(err).Msg("Failed to send result")
				return exitProtocol
			}
		}
		if fatal {
			return exitAppFailed
		}
	}
}

// errHub is a denial or failure the hub sent in reply to a request.
type errHub struct{ msg string }

func (e *errHub) Error() string { return e.msg }

// notify sends one frame that gets no reply together with the frame that
// follows it (Encoder.Hold): a step's output goes with the model request
// that comes next, its memory entry with its result. The hub sees the same
// frames in the same order, with one wakeup instead of two.
func (rt *runtime) notify(kind Kind, body any) error {
	b, err := jsonMarshal(body)
	if err != nil {
		return err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.nextID++
	return rt.enc.Hold(Frame{Kind: kind, ID: rt.nextID, Body: b})
}

// request sends one request and waits for its reply.
func (rt *runtime) request(kind Kind, body, out any) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.nextID++
	id := rt.nextID
	if err := rt.send(Frame{Kind: kind, ID: id}, body); err != nil {
		return err
	}
	for {
		f, err := rt.dec.Decode()
		if err != nil {
			return fmt.Errorf("failed to read reply: %w", err)
		}
		if f.Kind != KindReply || f.ID != id {
			return fmt.Errorf("%w: unexpected %s frame %d while waiting for reply %d", ErrBadFrame, f.Kind, f.ID, id)
		}
		if f.Error != "" {
			return &errHub{msg: f.Error}
		}
		if out == nil {
			return nil
		}
		return DecodeBody(f.Body, out)
	}
}
