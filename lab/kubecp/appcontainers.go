package kubecp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/homelab-migrate/migrate/lab/apps"
	"github.com/homelab-migrate/migrate/lab/sandbox"
)

// prepare makes the container's run from its image: a stand-in of
// lab/apps with the pod's mounts, env and address; or, for a plain
// userland image or an unknown one with a command, that command in
// lab/sandbox (as a Job's); an unknown image without a command cannot be
// "pulled" (apps.ErrUnknownImage).
func (p *appPod) prepare(ctx context.Context, ctr corev1.Container, volumes map[string]string) (*containerRun, error) {
	im, lookupErr := apps.Lookup(ctr.Image)
	if lookupErr != nil && len(ctr.Command) == 0 {
		return nil, lookupErr
	}

	pod := p.pod
	pod.Status.PodIP, pod.Status.PodIPs = p.ip, []corev1.PodIP{{IP: p.ip}}
	pod.Status.HostIP = p.c.cfg.Addr

	names, vars, err := p.c.containerEnv(ctx, &pod, ctr)
	if err != nil {
		return nil, err
	}

	root := filepath.Join(p.dir, "containers", ctr.Name)
	run := &containerRun{ctr: ctr}

	if lookupErr != nil || im.Program == nil {
		if run.spec, err = containerSpec(&pod, ctr, root, volumes, names, vars); err != nil {
			return nil, err
		}

		return run, p.c.writeHosts(ctx, &pod, root)
	}

	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}

	env := map[string]string{"HOSTNAME": pod.Name}
	for _, k := range names {
		env[k] = vars[k]
	}

	var args []string
	for _, a := range append(slices.Clone(ctr.Command), ctr.Args...) {
		args = append(args, expand(a, vars))
	}

	mounts := map[string]string{}

	for _, m := range ctr.VolumeMounts {
		src, ok := volumes[m.Name]
		if !ok {
			continue
		}

		if m.SubPath != "" {
			if filepath.IsAbs(m.SubPath) || slices.Contains(strings.Split(m.SubPath, "/"), "..") {
				return nil, fmt.Errorf("container %q: subPath %q must be a relative path without \"..\"", ctr.Name, m.SubPath)
			}

			src = filepath.Join(src, m.SubPath)
		}

		mounts[filepath.Clean(m.MountPath)] = src
	}

	run.program = im.Program
	run.app = &apps.Container{Args: args, Env: env, Mounts: mounts, Root: root, Addr: p.ip,
		Resolve: func(ctx context.Context, host string) (string, error) {
			return p.c.serviceAddress(ctx, pod.Namespace, host)
		},
		Routes: p.c.ingressRoutes}

	return run, nil
}

// start runs the container until it exits or ctx ends (137), its output
// to out, and returns its exit code.
func (r *containerRun) start(ctx context.Context, out io.Writer) (code int) {
	if r.program != nil {
		app := *r.app
		app.Out = out

		defer func() {
			if v := recover(); v != nil { // a bug of the stand-in: the container crashes, not the lab
				fmt.Fprintf(out, "panic: %v\n", v)

				code = 2
			}
		}()

		return r.program(ctx, &app)
	}

	cmd := sandbox.Command(ctx, r.spec)
	cmd.Stdout, cmd.Stderr = out, out // one pipe, as for Job pods
	cmd.WaitDelay = 5 * time.Second

	err := cmd.Run()

	var ee *exec.ExitError

	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode()
	default: // killed, or not started
		fmt.Fprintf(out, "%v\n", err)

		return 137
	}
}
