package ratelog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestPassesNPerPeriodAndReportsTheRest(t *testing.T) {
	var buf bytes.Buffer
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h := newClock(slog.NewTextHandler(&buf, nil), 3, time.Minute, clock.now)
	log := slog.New(h).With("src", "peer")

	for i := range 10 {
		log.Warn("bad peer", "i", i)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3, "records passed in the first period")
	assert.Contains(t, lines[2], "i=2")
	assert.Equal(t, int64(7), h.Suppressed())

	buf.Reset()
	clock.t = clock.t.Add(59 * time.Second)
	log.Warn("bad peer", "i", 10)
	assert.Empty(t, buf.String(), "still the first period")

	clock.t = clock.t.Add(time.Second)
	log.Warn("bad peer", "i", 11)
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[0], "log lines suppressed")
	assert.Contains(t, lines[0], "suppressed=8")
	assert.Contains(t, lines[1], "i=11")
	assert.Equal(t, int64(8), h.Suppressed())

	buf.Reset()
	clock.t = clock.t.Add(time.Hour)
	log.Warn("bad peer", "i", 12)
	assert.NotContains(t, buf.String(), "suppressed", "nothing dropped since the last report")
}

func TestEnabledFollowsTheWrappedHandler(t *testing.T) {
	h := New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}), 1, time.Second)
	assert.False(t, h.Enabled(context.Background(), slog.LevelInfo))
	assert.True(t, h.Enabled(context.Background(), slog.LevelError))
}
