package spoke

import (
	"context"
	"os"

	"github.com/rs/zerolog"
)

// TestSpawner is a spawner a test drives directly (see
// spawnclone_redteam_test.go).
type TestSpawner struct{ s *spawner }

// StartTestSpawner starts binary as a spawner.
func StartTestSpawner(binary string) (*TestSpawner, error) {
	s, err := startSpawner(binary, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	return &TestSpawner{s}, nil
}

// PID is the spawner's pid.
func (t *TestSpawner) PID() int { return t.s.pid }

// Spawn asks the spawner to start the spoke binary with args under the
// encoded policy and returns its pid.
func (t *TestSpawner) Spawn(ctx context.Context, args []string, policy string, stderr *os.File, files []*os.File) (int, error) {
	p, err := t.s.spawn(ctx, args, policy, stderr, files)
	if err != nil {
		return 0, err
	}
	return p.pid, nil
}

// Close ends the spawner.
func (t *TestSpawner) Close() { t.s.close() }
