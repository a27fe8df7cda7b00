package engine

import (
	"log/slog"
	"os"
)

func quietLogger() *slog.Logger {
	if os.Getenv("ENGINE_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
