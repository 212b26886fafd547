package apps

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Container is what a stand-in runs with: the pod's view of it.
type Container struct {
	Args []string          // command and args after the image's entrypoint
	Env  map[string]string // the container's environment, as kubelet made it
	// Mounts are the container's volume mounts: a path inside -> the host
	// directory or file it is; Root is where the rest of its tree lives.
	Mounts map[string]string
	Root   string
	Addr   string    // the pod's address: what it listens on
	Out    io.Writer // its stdout and stderr
	// Resolve is the cluster's DNS for the stand-in: a Service's name
	// (NAME, NAME.NS, NAME.NS.svc[.cluster.local]) -> the address of a
	// Ready pod behind it; nil or not a Service: host is returned as is.
	Resolve func(ctx context.Context, host string) (string, error)
	// Routes are the cluster's Ingress rules of an ingress class, as a
	// controller watching them sees them (the ingress-nginx stand-in's);
	// nil: none.
	Routes func(ctx context.Context, class string) ([]Route, error)
}

// resolve is host as the container's DNS answers it.
func (c *Container) resolve(ctx context.Context, host string) (string, error) {
	if c.Resolve == nil {
		return host, nil
	}

	return c.Resolve(ctx, host)
}

// Path is where the container's path p lives on the host: under the
// mount whose path is the longest prefix of p, else under Root. p is
// cleaned first, so ".." cannot leave the container's tree.
func (c *Container) Path(p string) string {
	p = path.Clean("/" + p)

	mounts := make([]string, 0, len(c.Mounts))
	for m := range c.Mounts {
		mounts = append(mounts, m)
	}

	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })

	for _, m := range mounts {
		if p == m || strings.HasPrefix(p, strings.TrimSuffix(m, "/")+"/") {
			return filepath.Join(c.Mounts[m], strings.TrimPrefix(p, m))
		}
	}

	return filepath.Join(c.Root, p)
}

func (c *Container) logf(format string, args ...any) {
	fmt.Fprintf(c.Out, format+"\n", args...)
}

// Program is a stand-in's main: it returns its exit code when it fails or
// when ctx ends (killed: 137).
type Program func(ctx context.Context, c *Container) int

// Image is what Lookup found for an image reference.
type Image struct {
	Name, Tag string
	App       string  // the stand-in's name; "" for Command images
	Version   Version // the tag as a version (stand-ins only)
	Program   Program // nil: run the container's command (Command)
	// Command: a plain userland, whose containers run their command with
	// the host's programs.
	Command bool
	// Userland prepares the root of a Command image that has more than
	// the host's programs (postgres); nil for the others.
	Userland Userland
	// Entrypoint and Cmd are the image's, for a container without a
	// command (Userland images only).
	Entrypoint, Cmd []string
}

// ErrUnknownImage is an image the lab has no stand-in for.
var ErrUnknownImage = errors.New("the lab has no stand-in for this image")

// standIn is one row of the table: the image names, the app, its main.
type standIn struct {
	names   []string
	app     string
	program func(v Version) Program
}

var table = []standIn{
	{[]string{"matrixdotorg/synapse", "ghcr.io/element-hq/synapse"}, "synapse", synapse},
	{[]string{"jellyfin/jellyfin", "ghcr.io/jellyfin/jellyfin"}, "jellyfin", jellyfin},
	{[]string{"ghcr.io/blakeblackshear/frigate"}, "frigate", frigate},
	{[]string{"ghcr.io/servercontainers/samba"}, "samba", samba},
	{[]string{"registry.k8s.io/ingress-nginx/controller"}, "ingress-nginx", ingressNginx},
	{[]string{"gitea/act_runner"}, "act_runner", actRunner},
}

// userlands are images whose containers run their own command.
var userlands = []string{"busybox", "alpine", "debian", "ubuntu", "postgres"}

// Lookup finds the program of an image ("name[:tag][@digest]"; a
// "docker.io/" or "library/" prefix is the same image). A stand-in's tag
// must be a version (samba's and act_runner's any tag); an image the
// table does not know is ErrUnknownImage.
func Lookup(image string) (Image, error) {
	name, tag := splitImage(image)
	im := Image{Name: name, Tag: tag}

	if slicesContains(userlands, name) {
		im.Command = true

		if name == "postgres" {
			u, err := postgresUserland(tag)
			if err != nil {
				return im, fmt.Errorf("%w: %w", err, ErrUnknownImage)
			}

			im.Userland, im.Entrypoint, im.Cmd = u, []string{"docker-entrypoint.sh"}, []string{"postgres"}
		}

		return im, nil
	}

	for _, s := range table {
		if !slicesContains(s.names, name) {
			continue
		}

		im.App = s.app

		v, err := ParseVersion(tag)
		if err != nil && s.app != "samba" && s.app != "act_runner" {
			return im, fmt.Errorf("image %s: tag %q is not a version of %s the lab can stand in for (pin a release, e.g. %s:%s): %w",
				image, tag, s.app, name, exampleTag(s.app), ErrUnknownImage)
		}

		im.Version = v
		im.Program = s.program(v)

		return im, nil
	}

	return im, fmt.Errorf("image %s: %w (it knows %s, and runs the command of %s images)", image, ErrUnknownImage, known(), strings.Join(userlands, ", "))
}

func exampleTag(app string) string {
	switch app {
	case "synapse":
		return "v1.120.2"
	case "jellyfin":
		return "10.10.7"
	case "frigate":
		return "0.14.1"
	default:
		return "v1.11.3"
	}
}

func known() string {
	var names []string
	for _, s := range table {
		names = append(names, s.names...)
	}

	return strings.Join(names, ", ")
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}

	return false
}

// splitImage is an image reference's name (without the default
// registry's prefixes) and tag ("latest" when none).
func splitImage(image string) (name, tag string) {
	image, _, _ = strings.Cut(image, "@")
	name, tag = image, "latest"

	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		name, tag = image[:i], image[i+1:]
	}

	name = strings.TrimPrefix(name, "docker.io/")
	name = strings.TrimPrefix(name, "index.docker.io/")
	name = strings.TrimPrefix(name, "library/")

	return name, tag
}

// Version is a release number: major, minor, patch.
type Version [3]int

// ParseVersion reads "v1.120.2", "10.10.3", "1.120" (patch 0); a
// suffix after "-" or "+" ("1.120.2+bookworm1") is ignored.
func ParseVersion(s string) (Version, error) {
	var v Version

	core := strings.TrimPrefix(s, "v")
	if i := strings.IndexAny(core, "-+"); i >= 0 {
		core = core[:i]
	}

	parts := strings.Split(core, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return v, fmt.Errorf("%q is not a version (X.Y or X.Y.Z)", s)
	}

	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, fmt.Errorf("%q is not a version (X.Y or X.Y.Z)", s)
		}

		v[i] = n
	}

	return v, nil
}

// Less says whether v is older than w.
func (v Version) Less(w Version) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}

	return false
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// serve serves h on addr:port until ctx ends (137) or the listener fails
// (1: as a server that cannot bind exits).
func serve(ctx context.Context, c *Container, port int, h http.Handler) int {
	return serveAll(ctx, c, map[int]http.Handler{port: h})
}

// serveAll serves each handler on its port of the container's address; a
// nil handler only accepts connections (and closes them).
func serveAll(ctx context.Context, c *Container, handlers map[int]http.Handler) int {
	var listeners []net.Listener

	defer func() {
		for _, l := range listeners {
			l.Close() //nolint:errcheck
		}
	}()

	failed := make(chan error, len(handlers))

	for port, h := range handlers {
		l, err := net.Listen("tcp", net.JoinHostPort(c.Addr, strconv.Itoa(port)))
		if err != nil {
			c.logf("error: cannot listen on port %d: %v", port, err)

			return 1
		}

		listeners = append(listeners, l)

		if h == nil {
			go acceptOnly(l)

			continue
		}

		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}

		if th, ok := h.(tlsHandler); ok {
			// A client refusing the certificate is not the server's error.
			srv.ErrorLog = log.New(io.Discard, "", 0)
			srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: th.certificate}

			go func() { failed <- srv.ServeTLS(l, "", "") }()

			continue
		}

		go func() { failed <- srv.Serve(l) }()
	}

	select {
	case <-ctx.Done():
		return 137
	case err := <-failed:
		if ctx.Err() != nil {
			return 137
		}

		c.logf("error: %v", err)

		return 1
	}
}

func acceptOnly(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}

		conn.Close() //nolint:errcheck
	}
}

// text is a handler answering body with 200.
func text(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, body) //nolint:errcheck
	}
}

func jsonBody(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body) //nolint:errcheck
	}
}
