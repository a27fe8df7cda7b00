package engine

import (
	"log/slog"
	"sync"
	"time"
)

// logger wraps the configured slog.Logger with a rate limit for errors that
// can repeat at packet rate (socket errors), so a failing socket cannot
// flood the log.
type logger struct {
	l    *slog.Logger
	mu   sync.Mutex
	last map[string]time.Time
}

func newLogger(l *slog.Logger) *logger { return &logger{l: l, last: map[string]time.Time{}} }

// rateLimited logs err at WARN at most once a second per operation.
func (l *logger) rateLimited(op string, err error) {
	l.mu.Lock()
	now := time.Now()
	ok := now.Sub(l.last[op]) >= time.Second
	if ok {
		l.last[op] = now
	}
	l.mu.Unlock()
	if ok {
		l.l.Warn("engine "+op+" failed", "err", err)
	}
}
