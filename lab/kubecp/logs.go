package kubecp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's log endpoint: kwok plays the kubelet but serves no logs
// as one does (its server authenticates no client and needs a Logs
// object per pod), so the control plane serves, on the node's address
// and the kubelet's port, GET /containerLogs/NS/POD/CONTAINER, which the
// API server calls for pods/log: over HTTPS, the client authenticated by
// a certificate of the cluster CA (the API server's
// --kubelet-client-certificate) and authorized by a SubjectAccessReview
// of nodes/proxy, as a kubelet in webhook mode; the output the pod runner
// keeps per container (Dir/logs/pods/NS_NAME_UID/CONTAINER/0.log, in the
// CRI's format: TIMESTAMP STREAM P|F TEXT), with follow, tailLines,
// limitBytes, timestamps, sinceSeconds and sinceTime as kubelet has them.

// KubeletPort is the kubelet's port on the node's address.
const KubeletPort = 10250

// followPoll is how often a followed log is read again at its end.
var followPoll = 100 * time.Millisecond

// containerLogPath is where a container's output is kept.
func (c *ControlPlane) containerLogPath(pod *corev1.Pod, container string) string {
	return c.containerLogPathN(pod, container, 0)
}

// containerLogPathN is the log of the container's run after n restarts.
func (c *ControlPlane) containerLogPathN(pod *corev1.Pod, container string, n int) string {
	return filepath.Join(c.cfg.Dir, "logs", "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), container, strconv.Itoa(n)+".log")
}

// liveLogs are the container logs being written, by path: a follow
// ends at the end of a log that is no longer written.
type liveLogs struct {
	mu   sync.Mutex
	live map[string]bool
}

func (l *liveLogs) set(path string, live bool) {
	l.mu.Lock()
	defer l.mu.Unlock()

	if l.live == nil {
		l.live = map[string]bool{}
	}

	if live {
		l.live[path] = true
	} else {
		delete(l.live, path)
	}
}

func (l *liveLogs) is(path string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()

	return l.live[path]
}

// criLog writes a container's output in the CRI's log format: a record
// per line (F) or per piece of a line not ended yet (P), each stamped.
type criLog struct {
	mu sync.Mutex
	f  *os.File
}

func openCRILog(path string) (*criLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}

	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}

	return &criLog{f: f}, nil
}

func (l *criLog) Close() error { return l.f.Close() }

// stream is the writer of one of the container's streams (stdout, stderr).
func (l *criLog) stream(name string) io.Writer { return criStream{l, name} }

type criStream struct {
	l    *criLog
	name string
}

func (s criStream) Write(p []byte) (int, error) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()

	var b bytes.Buffer

	now := time.Now().UTC().Format(time.RFC3339Nano)

	for rest := p; len(rest) > 0; {
		line, tag := rest, "P"
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, tag = rest[:i], "F"
			rest = rest[i+1:]
		} else {
			rest = nil
		}

		fmt.Fprintf(&b, "%s %s %s %s\n", now, s.name, tag, line)
	}

	if _, err := s.l.f.Write(b.Bytes()); err != nil {
		return 0, err
	}

	return len(p), nil
}

// logRecord is one record of a CRI log.
type logRecord struct {
	at   time.Time
	text []byte // with its newline when the record ends a line
}

func parseRecord(line []byte) (logRecord, bool) {
	parts := bytes.SplitN(line, []byte(" "), 4)
	if len(parts) != 4 {
		return logRecord{}, false
	}

	at, err := time.Parse(time.RFC3339Nano, string(parts[0]))
	if err != nil {
		return logRecord{}, false
	}

	text := append([]byte(nil), parts[3]...) // its own: the line's buffer is reused
	if string(parts[2]) == "F" {
		text = append(text, '\n')
	}

	return logRecord{at: at, text: text}, true
}

// logOptions are the query of a containerLogs request, as kubelet reads it.
type logOptions struct {
	follow, timestamps bool
	previous           bool  // the run before the last restart
	tailLines          int64 // -1: all
	limitBytes         int64 // 0: no limit
	since              time.Time
}

func parseLogOptions(q map[string][]string) (logOptions, error) {
	o := logOptions{tailLines: -1}
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}

		return ""
	}

	var err error

	for _, b := range []struct {
		name string
		to   *bool
	}{{"follow", &o.follow}, {"timestamps", &o.timestamps}} {
		if v := get(b.name); v != "" {
			if *b.to, err = strconv.ParseBool(v); err != nil {
				return o, fmt.Errorf("%s=%q is not a boolean", b.name, v)
			}
		}
	}

	if v := get("previous"); v != "" {
		if o.previous, err = strconv.ParseBool(v); err != nil {
			return o, fmt.Errorf("previous=%q is not a boolean", v)
		}
	}

	tail := get("tailLines")
	if tail == "" && get("tail") != "all" {
		tail = get("tail")
	}

	for _, n := range []struct {
		name, value string
		to          *int64
	}{{"tailLines", tail, &o.tailLines}, {"limitBytes", get("limitBytes"), &o.limitBytes}} {
		if n.value == "" {
			continue
		}

		if *n.to, err = strconv.ParseInt(n.value, 10, 64); err != nil || *n.to < 0 {
			return o, fmt.Errorf("%s=%q is not a number of zero or more", n.name, n.value)
		}
	}

	if v := get("sinceSeconds"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s < 1 {
			return o, fmt.Errorf("sinceSeconds=%q is not a positive number", v)
		}

		o.since = time.Now().Add(-time.Duration(s) * time.Second)
	}

	if v := get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return o, fmt.Errorf("sinceTime=%q is not an RFC 3339 time", v)
		}

		if t.After(o.since) {
			o.since = t
		}
	}

	return o, nil
}

// serveKubelet listens on Addr:KubeletPort with the kubelet's serving
// certificate, accepting clients with a certificate of the cluster CA.
func (c *ControlPlane) serveKubelet() error {
	pki := filepath.Join(c.cfg.Dir, "pki")

	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "kubelet.crt"), filepath.Join(pki, "kubelet.key"))
	if err != nil {
		return err
	}

	cas := stdx509.NewCertPool()
	cas.AppendCertsFromPEM(c.cfg.CA.Crt)

	l, err := net.Listen("tcp", net.JoinHostPort(c.cfg.Addr, strconv.Itoa(KubeletPort)))
	if err != nil {
		return fmt.Errorf("kubecp: the kubelet's port: %w", err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", c.containerLogs)

	srv := &http.Server{
		Handler:           c.authenticated(mux),
		ReadHeaderTimeout: 10 * time.Second,
		// a client without a certificate is told 401, as kubelet tells it
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: cas,
			ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12},
		ErrorLog: log.New(io.Discard, "", 0), // a refused handshake is the client's to tell
	}
	c.kubelet = srv

	c.runners.Add(1)

	go func() {
		defer c.runners.Done()
		srv.ServeTLS(l, "", "") //nolint:errcheck // ends with Stop's Close
	}()

	return nil
}

// authenticated lets through a client whose certificate the cluster CA
// signed and whom the API server allows get nodes/proxy (kubelet's
// webhook authorization of /containerLogs).
func (c *ControlPlane) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)

			return
		}

		user := r.TLS.VerifiedChains[0][0].Subject
		review := map[string]any{
			"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
			"spec": map[string]any{
				"user": user.CommonName, "groups": user.Organization,
				"resourceAttributes": map[string]string{"verb": "get", "resource": "nodes", "subresource": "proxy", "name": c.cfg.NodeName},
			},
		}

		b, _ := json.Marshal(review) //nolint:errcheck

		var out struct {
			Status struct {
				Allowed bool `json:"allowed"`
			} `json:"status"`
		}

		if err := c.do(r.Context(), http.MethodPost, "/apis/authorization.k8s.io/v1/subjectaccessreviews", "application/json", bytes.NewReader(b), &out); err != nil {
			http.Error(w, "Authorization error: "+err.Error(), http.StatusInternalServerError)

			return
		}

		if !out.Status.Allowed {
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=get, resource=nodes, subresource(s)=[proxy])", user.CommonName), http.StatusForbidden)

			return
		}

		next.ServeHTTP(w, r)
	})
}

// containerLogs serves a container's output, following it while the
// container runs when asked.
func (c *ControlPlane) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, container := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")

	opts, err := parseLogOptions(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	var pod corev1.Pod

	err = c.do(r.Context(), http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/"+name, "application/json", nil, &pod)

	var he *httpError

	switch {
	case errors.As(err, &he) && he.code == http.StatusNotFound, err == nil && pod.Spec.NodeName != c.cfg.NodeName:
		http.Error(w, fmt.Sprintf("pod %q does not exist", name), http.StatusNotFound)

		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)

		return
	}

	if !hasContainer(&pod, container) {
		http.Error(w, fmt.Sprintf("container %q not found in pod %q", container, name), http.StatusNotFound)

		return
	}

	// the current run's log, or with previous the one before (kubelet's
	// restartCount names them)
	run := restartsOf(&pod, container)
	if opts.previous {
		if run == 0 {
			http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", container, name), http.StatusBadRequest)

			return
		}

		run--
		opts.follow = false
	}

	path := c.containerLogPathN(&pod, container, int(run))

	f, err := c.openLog(r.Context(), &pod, path, opts.follow)
	if err != nil {
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start: %v", container, name, err), http.StatusBadRequest)

		return
	}

	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)

	if f == nil {
		return // followed, and the container never ran
	}
	defer f.Close() //nolint:errcheck

	c.writeLog(r.Context(), w, f, path, opts)
}

func restartsOf(pod *corev1.Pod, container string) int32 {
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == container {
			return st.RestartCount
		}
	}

	return 0
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, ctr := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if ctr.Name == name {
			return true
		}
	}

	return false
}

// openLog opens a container's log. Not there yet: an error, or when
// following, it waits until the container starts (nil once the pod ran
// without starting it, or will never run).
func (c *ControlPlane) openLog(ctx context.Context, pod *corev1.Pod, path string, follow bool) (*os.File, error) {
	result := filepath.Join(c.cfg.Dir, "pods", string(pod.UID), "result.json")
	lastLook := time.Now()

	for {
		f, err := os.Open(path)
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			return f, err
		}

		if _, err := os.Stat(result); err == nil {
			if follow {
				return nil, nil //nolint:nilnil // ran without this container
			}

			return nil, errors.New("the container never started")
		}

		if !follow {
			return nil, errors.New("ContainerCreating")
		}

		// a pod the runner will not run (not a Job's, or ended) never starts
		if time.Since(lastLook) > 2*time.Second {
			lastLook = time.Now()

			var p corev1.Pod
			if err := c.do(ctx, http.MethodGet, "/api/v1/namespaces/"+pod.Namespace+"/pods/"+pod.Name, "application/json", nil, &p); err != nil ||
				p.UID != pod.UID || (p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending) || c.cfg.HostPath == nil || (!ownedByJob(&p) && !ownedByApp(&p)) {
				return nil, nil //nolint:nilnil
			}
		}

		select {
		case <-ctx.Done():
			return nil, nil //nolint:nilnil
		case <-time.After(followPoll):
		}
	}
}

// writeLog writes the records of the log f that opts selects, then, when
// following, what comes while the container runs.
func (c *ControlPlane) writeLog(ctx context.Context, w http.ResponseWriter, f *os.File, path string, opts logOptions) {
	flusher, _ := w.(http.Flusher) //nolint:errcheck
	out := &limitWriter{w: w, left: opts.limitBytes}

	emit := func(rec logRecord) bool {
		if rec.at.Before(opts.since) {
			return true
		}

		if opts.timestamps {
			out.Write([]byte(rec.at.Format(time.RFC3339Nano) + " ")) //nolint:errcheck
		}

		_, err := out.Write(rec.text)

		return err == nil
	}

	rd := bufio.NewReader(f)

	var pending []byte // a record not yet ended by its newline

	// read reads the complete records written so far
	read := func(each func(logRecord) bool) bool {
		for {
			line, err := rd.ReadBytes('\n')
			pending = append(pending, line...)

			if err != nil {
				return true
			}

			rec, ok := parseRecord(bytes.TrimSuffix(pending, []byte("\n")))
			pending = pending[:0]

			if ok && !each(rec) {
				return false
			}
		}
	}

	if opts.tailLines >= 0 {
		var recs []logRecord // the last tailLines lines: records up to a line's end count as one

		read(func(rec logRecord) bool {
			recs = append(recs, rec)

			return true
		})

		start, lines := len(recs), int64(0)
		for start > 0 {
			if bytes.HasSuffix(recs[start-1].text, []byte("\n")) {
				if lines == opts.tailLines {
					break
				}

				lines++
			}

			start--
		}

		for _, rec := range recs[start:] {
			if !emit(rec) {
				return
			}
		}
	} else if !read(emit) {
		return
	}

	if flusher != nil {
		flusher.Flush()
	}

	for opts.follow {
		live := c.live.is(path) // asked before reading: what was written before it ended is read

		if !read(func(rec logRecord) bool {
			ok := emit(rec)
			if ok && flusher != nil {
				flusher.Flush()
			}

			return ok
		}) || !live {
			return
		}

		select {
		case <-ctx.Done():
			return
		case <-time.After(followPoll):
		}
	}
}

// limitWriter writes up to left bytes (all when left is 0), then fails.
type limitWriter struct {
	w    io.Writer
	left int64
	full bool
}

var errLimit = errors.New("limitBytes reached")

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.left == 0 && !l.full {
		return l.w.Write(p)
	}

	if l.full {
		return 0, errLimit
	}

	if int64(len(p)) >= l.left {
		p, l.full = p[:l.left], true
	}

	l.left -= int64(len(p))

	n, err := l.w.Write(p)
	if err == nil && l.full {
		err = errLimit
	}

	return n, err
}
