package spoke

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// spin burns the calling thread's CPU for about d.
func spin(d time.Duration) {
	start := threadCPU()
	for threadCPU()-start < d {
	}
}

func TestHubMeter(t *testing.T) {
	tests := []struct {
		name    string
		max     time.Duration
		work    func(m *hubMeter)
		wantErr bool
		atLeast time.Duration
		atMost  time.Duration
	}{
		{"work is charged", 0, func(*hubMeter) { spin(20 * time.Millisecond) }, false, 20 * time.Millisecond, time.Second},
		{"a wait is not", 0, func(*hubMeter) { time.Sleep(50 * time.Millisecond) }, false, 0, 20 * time.Millisecond},
		{"the reader's decoding is", 0, func(m *hubMeter) { m.decoded.Add(int64(30 * time.Millisecond)) }, false, 30 * time.Millisecond, time.Second},
		{"over the bound", 10 * time.Millisecond, func(*hubMeter) { spin(20 * time.Millisecond) }, true, 20 * time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := hubMeter{max: tt.max, decoded: new(atomic.Int64)}
			m.start()
			tt.work(&m)
			err := m.stop()
			if got := errors.Is(err, ErrHubTime); got != tt.wantErr {
				t.Errorf("stop() = %v, want ErrHubTime: %t", err, tt.wantErr)
			}
			if spent := m.release(); spent < tt.atLeast || spent > tt.atMost {
				t.Errorf("charged %v, want between %v and %v", spent, tt.atLeast, tt.atMost)
			}
		})
	}
}

// TestHubMeterReleaseMidFrame: a step that ends while a frame is served
// (a failure returns from inside the switch) is still charged for it.
func TestHubMeterReleaseMidFrame(t *testing.T) {
	m := hubMeter{decoded: new(atomic.Int64)}
	m.start()
	spin(10 * time.Millisecond)
	if spent := m.release(); spent < 10*time.Millisecond {
		t.Errorf("release() = %v, want the frame's 10ms", spent)
	}
	if m.locked {
		t.Error("the meter still holds the thread")
	}
}

// BenchmarkHubMeter is what charging costs per frame served.
func BenchmarkHubMeter(b *testing.B) {
	m := hubMeter{decoded: new(atomic.Int64)}
	for b.Loop() {
		m.start()
		_ = m.stop()
	}
}

// BenchmarkDecodeTimed is what timing the reader's decoding adds to it.
func BenchmarkDecodeTimed(b *testing.B) {
	for b.Loop() {
		_ = cpuOf(func() {})
	}
}

// TestWaitingReleasesTheThread: a Handler's model call waits with the
// serving thread released and uncharged; the work before it is charged,
// and the meter holds the thread again after it.
func TestWaitingReleasesTheThread(t *testing.T) {
	m := hubMeter{decoded: new(atomic.Int64)}
	ctx := context.WithValue(context.Background(), meterKey{}, &m)
	m.start()
	spin(10 * time.Millisecond)
	Waiting(ctx, func() {
		if m.locked {
			t.Error("the serving thread is held during the wait")
		}
		spin(30 * time.Millisecond) // the call's own work, outside the step's charge
	})
	if !m.locked {
		t.Error("the meter does not hold the thread after the wait")
	}
	if spent := m.release(); spent < 10*time.Millisecond || spent >= 30*time.Millisecond {
		t.Errorf("charged %v, want the 10ms before the wait and not the 30ms in it", spent)
	}
	Waiting(context.Background(), func() {}) // outside a step: just runs
}
