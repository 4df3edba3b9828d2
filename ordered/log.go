package ordered

import "log/slog"

func slogJob(id int64, key string, seq int64) slog.Attr {
	return slog.Group("job", slog.Int64("id", id), slog.String("key", key), slog.Int64("seq", seq))
}
