// Package ratelog bounds how many log lines a source may write: a
// slog.Handler that passes at most N records a period to the handler it
// wraps and drops the rest, then reports how many it dropped.
//
//  1. Records are counted in periods of a fixed length, the first starting
//     with the first record.
//  2. The first N records of a period pass; later ones are dropped and
//     counted.
//  3. The first record of a later period is preceded by one warning,
//     "log lines suppressed", with the count dropped since the last such
//     warning (attribute "suppressed"), if any were.
//
// It is meant for lines a remote peer can cause (a malformed connection
// each), which must not fill a disk or a CPU at the peer's pace.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Handler is a rate-limited slog.Handler. Handlers made from one by
// WithAttrs and WithGroup share its limit. It is safe for concurrent use.
type Handler struct {
	next slog.Handler
	l    *limiter
}

type limiter struct {
	n      int
	period time.Duration
	now    func() time.Time

	mu         sync.Mutex
	start      time.Time // the current period's start
	passed     int       // records passed in the current period
	dropped    int       // records dropped since the last report
	suppressed int64     // records dropped in all
}

// New returns a handler that passes at most n records a period to next
// (n at least 1, period at least a millisecond).
func New(next slog.Handler, n int, period time.Duration) *Handler {
	return newClock(next, n, period, time.Now)
}

// newClock is New with a clock, for tests.
func newClock(next slog.Handler, n int, period time.Duration, now func() time.Time) *Handler {
	return &Handler{next: next, l: &limiter{n: max(n, 1), period: max(period, time.Millisecond), now: now}}
}

// Enabled reports whether the wrapped handler takes records of level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle passes r on if the current period has room, else drops it.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	pass, report := h.l.take()
	if report > 0 {
		w := slog.NewRecord(h.l.now(), slog.LevelWarn, "log lines suppressed", 0)
		w.AddAttrs(slog.Int("suppressed", report))
		if err := h.next.Handle(ctx, w); err != nil {
			return err
		}
	}
	if !pass {
		return nil
	}
	return h.next.Handle(ctx, r)
}

// take counts one record: pass says whether it goes on, report how many
// records dropped earlier are to be reported before it.
func (l *limiter) take() (pass bool, report int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.start.IsZero() || now.Sub(l.start) >= l.period {
		l.start, l.passed = now, 0
		report, l.dropped = l.dropped, 0
	}
	if l.passed >= l.n {
		l.dropped++
		l.suppressed++
		return false, report
	}
	l.passed++
	return true, report
}

// Suppressed is how many records the handler (and those made from it) has
// dropped in all.
func (h *Handler) Suppressed() int64 {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	return h.l.suppressed
}

// WithAttrs returns a handler with attrs that shares h's limit.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), l: h.l}
}

// WithGroup returns a handler with a group that shares h's limit.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), l: h.l}
}
