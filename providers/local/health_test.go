package local_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/local"
)

// TestHTTPCheckHealth: an app's health check as the example's phases end
// with (Jellyfin's /health on its NodePort): it fails, naming the last
// answer, while the app is starting (503), and passes once it answers
// "Healthy", saying so in the step's log.
func TestHTTPCheckHealth(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	var refused atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" || !up.Load() {
			refused.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("Unhealthy"))
			return
		}
		w.Write([]byte("Healthy"))
	}))
	t.Cleanup(srv.Close)
	p := configured(t, local.New(), t.TempDir())
	check := func(timeout string) cty.Value {
		return obj(map[string]cty.Value{"url": cty.StringVal(srv.URL + "/health"), "contains": cty.StringVal("Healthy"), "timeout": cty.StringVal(timeout), "interval": cty.StringVal("100ms")})
	}

	r := apply(context.Background(), p, local.HTTPCheck, "jellyfin_health", check("1s"), &bytes.Buffer{})
	wantErr(t, r.Diagnostics, "HTTP Check Failed", "did not answer 200 within 1s; the last answer was status 503")

	var log bytes.Buffer
	done := make(chan providers.ApplyResponse)
	before := refused.Load()
	go func() { done <- apply(context.Background(), p, local.HTTPCheck, "jellyfin_health", check("2m"), &log) }()
	for refused.Load() < before+3 { // the app is still starting while the check asks
		select {
		case r := <-done:
			t.Fatalf("the check ended before the app was up: %v", r.Diagnostics.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	up.Store(true)
	if r := <-done; r.Diagnostics.HasErrors() {
		t.Fatalf("the check failed once the app was up: %v\n%s", r.Diagnostics.Err(), log.String())
	}
	if want := "GET " + srv.URL + "/health answered 200, its body containing \"Healthy\""; !strings.Contains(log.String(), want) {
		t.Errorf("the log does not say %q:\n%s", want, log.String())
	}
}
