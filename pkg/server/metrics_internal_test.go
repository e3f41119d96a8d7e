package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
)

// TestMetricsOffKeepsNone: a server started with ops.metrics false keeps
// no registry and hands the runtime no observer (the door's only
// middleware is tracing's, no live-stream count, no processor or webhook
// observer), and its /metrics handler answers 404 naming the setting. On,
// the same wiring hands out every observer.
func TestMetricsOffKeepsNone(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := settings.Default()
		cfg.Listen, cfg.Data, cfg.Ops.Metrics = "127.0.0.1:0", t.TempDir(), on
		none := ""
		cfg.NATS.Listen = &none
		s, err := Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		obs := s.instruments()
		kept := s.metrics != nil || obs.live != nil || obs.processor != nil || obs.webhooks != nil || len(obs.middleware) != 1
		if on != kept {
			t.Errorf("ops.metrics %v: registry %v, observers %+v", on, s.metrics != nil, obs)
		}
		rec := httptest.NewRecorder()
		s.Metrics().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		off := rec.Code == http.StatusNotFound && strings.Contains(rec.Body.String(), "ops.metrics")
		if on == off || on && !strings.Contains(rec.Body.String(), "agentbus_build_info") {
			t.Errorf("ops.metrics %v: GET /metrics %d %.200s", on, rec.Code, rec.Body.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.Stop(ctx)
		cancel()
	}
}
