package bot

import (
	"fmt"
	"sync"
	"time"

	"maunium.net/go/mautrix/id"
)

// rateLimiter is a token bucket per user: each user may send burst messages
// at once and then one every per/burst. It is safe for concurrent use.
type rateLimiter struct {
	burst    float64
	interval time.Duration // time to earn one token

	mu      sync.Mutex
	buckets map[id.UserID]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// newRateLimiter allows messages per window for each user.
func newRateLimiter(messages int, window time.Duration) *rateLimiter {
	return &rateLimiter{
		burst:    float64(messages),
		interval: window / time.Duration(messages),
		buckets:  map[id.UserID]*bucket{},
	}
}

// allow takes a token for user at now, if one is left.
func (r *rateLimiter) allow(user id.UserID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.buckets[user]
	if !ok {
		b = &bucket{tokens: r.burst, at: now}
		r.buckets[user] = b
	}
	if elapsed := now.Sub(b.at); elapsed > 0 {
		b.tokens = min(r.burst, b.tokens+float64(elapsed)/float64(r.interval))
		b.at = now
	}
	// Full buckets carry no state: dropping them bounds the map by the
	// users active within one window.
	if len(r.buckets) > 1024 {
		for u, o := range r.buckets {
			if u != user && o.tokens+float64(now.Sub(o.at))/float64(r.interval) >= r.burst {
				delete(r.buckets, u)
			}
		}
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// rateWords says a rate in plain words: "at most 10 messages a minute",
// "at most 5 messages every 30 seconds".
func rateWords(n int, per time.Duration) string {
	return fmt.Sprintf("at most %d message%s %s", n, plural(n), everyWords(per))
}

// everyWords says "a minute", "every 2 hours", "every 90 seconds".
func everyWords(d time.Duration) string {
	for _, u := range []struct {
		unit     time.Duration
		one, per string
	}{{time.Hour, "an hour", "hours"}, {time.Minute, "a minute", "minutes"}, {time.Second, "a second", "seconds"}} {
		if d%u.unit != 0 {
			continue
		}
		if n := d / u.unit; n != 1 {
			return fmt.Sprintf("every %d %s", n, u.per)
		}
		return u.one
	}
	return "every " + d.String()
}
