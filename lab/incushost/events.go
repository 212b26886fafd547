package incushost

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// The event stream (GET /1.0/events, a websocket, what `incus monitor`
// and the CLI's progress read): operation events as operations start and
// end, and lifecycle events as instances are created, started, stopped
// and deleted, in the daemon's envelope. No logging events.

type eventHub struct {
	mu   sync.Mutex
	subs map[*eventSub]struct{}
}

type eventSub struct {
	types map[string]bool // empty: every type
	ch    chan []byte
}

// publish sends an event to every subscriber of its type; one too slow to
// take it misses it, as a daemon's lagging listener does.
func (h *eventHub) publish(typ string, metadata any) {
	b, err := json.Marshal(map[string]any{"type": typ, "timestamp": time.Now().UTC(), "metadata": metadata,
		"location": "none", "project": "default"})
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		if len(sub.types) > 0 && !sub.types[typ] {
			continue
		}
		select {
		case sub.ch <- b:
		default:
		}
	}
}

func (h *eventHub) subscribe(types map[string]bool) *eventSub {
	sub := &eventSub{types: types, ch: make(chan []byte, 256)}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*eventSub]struct{}{}
	}
	h.subs[sub] = struct{}{}
	h.mu.Unlock()
	return sub
}

func (h *eventHub) unsubscribe(sub *eventSub) {
	h.mu.Lock()
	delete(h.subs, sub)
	h.mu.Unlock()
}

// lifecycle publishes a lifecycle event about an instance.
func (s *Server) lifecycle(action, instance string) {
	s.hub.publish("lifecycle", map[string]any{"action": action, "source": "/1.0/instances/" + instance,
		"context": map[string]any{}, "requestor": nil})
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// getEvents streams events over a websocket until the client goes or the
// lab closes.
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) {
	types := map[string]bool{}
	for _, t := range strings.Split(r.URL.Query().Get("type"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			types[t] = true
		}
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	defer conn.Close()
	sub := s.hub.subscribe(types)
	defer s.hub.unsubscribe(sub)
	gone := make(chan struct{})
	go func() { // reads only to see the client close
		defer close(gone)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	for {
		select {
		case b := <-sub.ch:
			if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
				return
			}
		case <-gone:
			return
		case <-s.closeCtx.Done():
			return
		}
	}
}
