package incushost

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// operation is a background operation, as the daemon's: mutations answer
// 202 with one, its failure shows only when it is waited for.
type operation struct {
	ID          string              `json:"id"`
	Class       string              `json:"class"`
	Description string              `json:"description"`
	CreatedAt   time.Time           `json:"created_at"`
	UpdatedAt   time.Time           `json:"updated_at"`
	Status      string              `json:"status"`
	StatusCode  int                 `json:"status_code"`
	Resources   map[string][]string `json:"resources"`
	Metadata    map[string]any      `json:"metadata"`
	MayCancel   bool                `json:"may_cancel"`
	Err         string              `json:"err"`
	Location    string              `json:"location"`

	errCode int
	done    chan struct{}
}

type operations struct {
	ttl time.Duration
	mu  sync.Mutex
	ops map[string]*operation
	// notify, if set, is told of an operation as it starts and as it ends
	// (the event stream).
	notify func(op operation)
}

func newOperations(ttl time.Duration) *operations {
	return &operations{ttl: ttl, ops: map[string]*operation{}}
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// start runs fn as an operation; fn's metadata and error are its result.
func (o *operations) start(class, desc string, resources map[string][]string, fn func(op *operation) (map[string]any, error)) *operation {
	return o.startID(newID(), class, desc, resources, nil, fn)
}

// startID is start with a given ID and first metadata.
func (o *operations) startID(id, class, desc string, resources map[string][]string, meta map[string]any, fn func(op *operation) (map[string]any, error)) *operation {
	now := time.Now().UTC()
	if meta == nil {
		meta = map[string]any{}
	}
	op := &operation{ID: id, Class: class, Description: desc, CreatedAt: now, UpdatedAt: now,
		Status: "Running", StatusCode: 103, Resources: resources, Metadata: meta, Location: "none",
		done: make(chan struct{})}
	o.mu.Lock()
	o.ops[op.ID] = op
	o.mu.Unlock()
	o.told(op)
	go func() {
		meta, err := fn(op)
		o.mu.Lock()
		op.UpdatedAt = time.Now().UTC()
		for k, v := range meta {
			op.Metadata[k] = v
		}
		if err != nil {
			op.Status, op.StatusCode, op.Err = "Failure", 400, err.Error()
			op.errCode = 400
			var ae *apiError
			if errors.As(err, &ae) {
				op.errCode = ae.code
			}
		} else {
			op.Status, op.StatusCode = "Success", 200
		}
		o.mu.Unlock()
		o.told(op)
		close(op.done)
		time.AfterFunc(o.ttl, func() { // finished operations vanish, as the daemon's do
			o.mu.Lock()
			delete(o.ops, op.ID)
			o.mu.Unlock()
		})
	}()
	return op
}

func (o *operations) told(op *operation) {
	if o.notify != nil {
		o.notify(o.snapshot(op))
	}
}

// snapshot copies the operation's public part under the lock.
func (o *operations) snapshot(op *operation) operation {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := *op
	c.Metadata = map[string]any{}
	for k, v := range op.Metadata {
		c.Metadata[k] = v
	}
	return c
}

func (o *operations) get(id string) *operation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ops[id]
}

// async answers 202 with the operation.
func (o *operations) async(w http.ResponseWriter, op *operation) {
	writeJSON(w, http.StatusAccepted, map[string]any{"type": "async", "status": "Operation created", "status_code": 100,
		"operation": "/1.0/operations/" + op.ID, "metadata": o.snapshot(op)})
}

func (s *Server) opRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /1.0/operations", s.listOps)
	mux.HandleFunc("GET /1.0/operations/{id}", func(w http.ResponseWriter, r *http.Request) {
		op := s.ops.get(r.PathValue("id"))
		if op == nil {
			fail(w, http.StatusNotFound, "Operation not found")
			return
		}
		syncOK(w, s.ops.snapshot(op))
	})
	mux.HandleFunc("GET /1.0/operations/{id}/wait", s.waitOp)
	mux.HandleFunc("DELETE /1.0/operations/{id}", func(w http.ResponseWriter, r *http.Request) {
		op := s.ops.get(r.PathValue("id"))
		if op == nil {
			fail(w, http.StatusNotFound, "Operation not found")
			return
		}
		// No operation of the lab can be cancelled (as a record-output exec).
		fail(w, http.StatusBadRequest, "This operation can't be cancelled")
	})
}

func (s *Server) listOps(w http.ResponseWriter, r *http.Request) {
	s.ops.mu.Lock()
	ids := make([]*operation, 0, len(s.ops.ops))
	for _, op := range s.ops.ops {
		ids = append(ids, op)
	}
	s.ops.mu.Unlock()
	out := map[string][]operation{}
	urls := map[string][]string{}
	for _, op := range ids {
		c := s.ops.snapshot(op)
		key := map[string]string{"Running": "running", "Success": "success", "Failure": "failure"}[c.Status]
		out[key] = append(out[key], c)
		urls[key] = append(urls[key], "/1.0/operations/"+c.ID)
	}
	if r.URL.Query().Get("recursion") == "1" {
		syncOK(w, out)
		return
	}
	syncOK(w, urls)
}

// waitOp is the long poll: HTTP 200 whatever the end, a failure as a body
// of type "error"; ?timeout=N (seconds, -1 forever) expires as the daemon
// says it, "context deadline exceeded".
func (s *Server) waitOp(w http.ResponseWriter, r *http.Request) {
	op := s.ops.get(r.PathValue("id"))
	if op == nil {
		fail(w, http.StatusNotFound, "Operation not found")
		return
	}
	var expire <-chan time.Time
	if t, err := strconv.Atoi(r.URL.Query().Get("timeout")); err == nil && t >= 0 {
		expire = time.After(time.Duration(t) * time.Second)
	}
	select {
	case <-op.done:
	case <-expire:
		writeJSON(w, http.StatusOK, map[string]any{"type": "error", "error": "context deadline exceeded", "error_code": 500})
		return
	case <-r.Context().Done():
		return
	}
	c := s.ops.snapshot(op)
	if c.Status == "Failure" {
		writeJSON(w, http.StatusOK, map[string]any{"type": "error", "error": c.Err, "error_code": op.errCode, "metadata": c})
		return
	}
	syncOK(w, c)
}

func decodeCert(s string) ([]byte, error) {
	if b, _ := pem.Decode([]byte(s)); b != nil {
		return b.Bytes, nil
	}
	der, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(der) == 0 {
		return nil, errors.New("the certificate is neither base64 DER nor PEM")
	}
	return der, nil
}
