package incusapi

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Answer shapes seen on the real daemon that the real daemon does not
// produce on demand: checked against a fake.
func TestOperationAnswerShapes(t *testing.T) {
	var waits atomic.Int32
	mux := http.NewServeMux()
	async := func(w http.ResponseWriter, id string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"type":"async","status":"Operation created","status_code":100,"operation":"/1.0/operations/%s",`+
			`"metadata":{"id":"%s","description":"Stopping instance","status":"Running","status_code":103}}`, id, id)
	}
	mux.HandleFunc("PUT /1.0/instances/{name}/state", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("project") != "p1" {
			t.Errorf("no project parameter: %s", r.URL)
		}
		async(w, r.PathValue("name"))
	})
	// A failure reported in the operation's metadata, HTTP 200.
	mux.HandleFunc("GET /1.0/operations/metafail/wait", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"type":"sync","status":"Success","status_code":200,"metadata":{"id":"metafail","status":"Failure",`+
			`"status_code":400,"err":"The instance is already stopped"}}`)
	})
	// Gone already.
	mux.HandleFunc("GET /1.0/operations/gone/wait", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"type":"error","error_code":404,"error":"Operation not found"}`)
	})
	// A bare "context deadline exceeded" while the operation still runs,
	// then success.
	mux.HandleFunc("GET /1.0/operations/slow/wait", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("timeout") != "-1" {
			t.Errorf("wait without timeout=-1: %s", r.URL)
		}
		if waits.Add(1) == 1 {
			fmt.Fprint(w, `{"type":"error","error_code":500,"error":"context deadline exceeded"}`)
			return
		}
		fmt.Fprint(w, `{"type":"sync","metadata":{"id":"slow","status":"Success","status_code":200}}`)
	})
	mux.HandleFunc("GET /1.0/operations/slow", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"type":"sync","metadata":{"id":"slow","status":"Running","status_code":103}}`)
	})
	// A hanging wait (for ctx deadline).
	mux.HandleFunc("GET /1.0/operations/hang/wait", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	// Not JSON (a proxy in the way).
	mux.HandleFunc("GET /1.0/instances/html", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, "<html>bad gateway</html>")
	})
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := New(Options{URL: srv.URL, ServerCert: certPEM, Project: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)

	err = c.SetState(ctx, "metafail", InstanceStatePut{Action: "stop"})
	if !IsAlreadyInState(err) || !strings.Contains(err.Error(), "already stopped") {
		t.Errorf("metadata failure: %v", err)
	}
	err = c.SetState(ctx, "gone", InstanceStatePut{Action: "stop"})
	if err == nil || !strings.Contains(err.Error(), "vanished") {
		t.Errorf("vanished operation: %v", err)
	}
	if err := c.SetState(ctx, "slow", InstanceStatePut{Action: "stop"}); err != nil || waits.Load() != 2 {
		t.Errorf("wait interrupted by a bare deadline: %v (waits %d)", err, waits.Load())
	}
	short := ctxT(t, 300*time.Millisecond)
	start := time.Now()
	if err := c.SetState(short, "hang", InstanceStatePut{Action: "stop"}); err == nil ||
		!strings.Contains(err.Error(), "deadline exceeded") || time.Since(start) > 2*time.Second {
		t.Errorf("hanging wait with a ctx deadline: %v after %v", err, time.Since(start))
	}
	if _, _, err := c.Instance(ctx, "html"); err == nil || !strings.Contains(err.Error(), "not an Incus API answer") {
		t.Errorf("non-JSON answer: %v", err)
	}
}

func TestInstancesPostJSON(t *testing.T) {
	req := InstancesPost{
		Name:   "talos",
		Type:   "virtual-machine",
		Source: InstanceSource{Type: "none"},
		InstancePut: InstancePut{
			Config:  map[string]string{"limits.cpu": "4"},
			Devices: map[string]map[string]string{"data": {"type": "disk", "source": "/tank", "path": "/var/mnt/data"}},
		},
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"config":{"limits.cpu":"4"},"devices":{"data":{"path":"/var/mnt/data","source":"/tank","type":"disk"}},` +
		`"ephemeral":false,"profiles":null,"stateful":false,"description":"","name":"talos","type":"virtual-machine",` +
		`"source":{"type":"none"}}`
	if string(b) != want {
		t.Fatalf("InstancesPost JSON:\n got %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(InstanceStatePut{Action: "stop", Timeout: 30})
	if string(b) != `{"action":"stop","timeout":30,"force":false,"stateful":false}` {
		t.Fatalf("InstanceStatePut JSON: %s", b)
	}
}
