package helm_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
)

// stoppedApply applies a step with a Stop channel, closes it once made()
// says the step's effect is there, and returns the answer, its log and
// how long after the stop it came.
func stoppedApply(t *testing.T, p providers.Interface, typ, name string, cfg cty.Value, made func() bool) (providers.ApplyResponse, string, time.Duration) {
	t.Helper()
	stop := make(chan struct{})
	type result struct {
		r   providers.ApplyResponse
		log string
	}
	done := make(chan result, 1)
	go func() {
		var log bytes.Buffer
		r := p.Apply(context.Background(), providers.ApplyRequest{Type: typ, Addr: addr(typ, name), Config: cfg, Log: &log, Stop: stop})
		done <- result{r, log.String()}
	}()
	waitFor(t, typ+"'s effect", made)
	time.Sleep(time.Second) // into the wait
	at := time.Now()
	close(stop)
	select {
	case res := <-done:
		return res.r, res.log, time.Since(at)
	case <-time.After(30 * time.Second):
		t.Fatalf("closing Stop did not end %s's wait", typ)
	}
	panic("unreachable")
}

// TestManifestWaitStopped: a gentle stop ends wait_for at once, after
// the objects are applied: Stopped, with the revert data that deletes them
// and what was not waited for.
func TestManifestWaitStopped(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "manstop")
	// Its pods go to no node: it never becomes Available.
	file := yamlFile(t, `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {migrate.test/nowhere: "true"}
      containers: [{name: web, image: busybox:1.36}]
`)
	cfg := manifestCfg([]string{file}, nil, map[string]cty.Value{"namespace": str(ns), "wait_for": str("Available"), "wait_timeout": str("10m")})
	r, log, took := stoppedApply(t, p, helm.Manifest, "web", cfg, func() bool {
		_, err := k.client.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
		return err == nil
	})
	t.Logf("wait_for (10m) ended %s after the stop", took.Round(time.Microsecond))
	if took > 5*time.Second {
		t.Errorf("wait_for ended %s after the stop, want at once", took)
	}
	if !r.Stopped || r.Revert == nil || !strings.Contains(r.Revert.Description, "delete the 1 object(s) this step created") {
		t.Fatalf("a stopped wait answered Stopped=%v revert data %+v (%v)", r.Stopped, r.Revert, r.Diagnostics)
	}
	contains(t, "the answer", fmt.Sprint(r.Diagnostics.Err()), "Stopped While Waiting", "its 1 object(s) are applied", "Deployment "+ns+"/web becoming Available (wait_for", "was not waited for")
	contains(t, "the log", log, "Deployment "+ns+"/web created", "stopped waiting for Deployment "+ns+"/web to be Available")
	revert(t, p, helm.Manifest, "web", cfg, r.Revert)
}

// TestJobWaitStopped: a gentle stop ends the wait for a Job's completion
// at once: the Job is left running for the next run to wait for, the
// answer says Stopped with the revert data that deletes it.
func TestJobWaitStopped(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "jobstop")
	cfg := jobConfig(k, ns, "restore", podTemplate(nil, map[string]cty.Value{"nodeSelector": strMap(map[string]string{"migrate.test/nowhere": "true"})}),
		map[string]cty.Value{"timeout": str("10m")})
	r, log, took := stoppedApply(t, p, helm.Job, "restore", cfg, func() bool { return len(k.jobs(t, ns)) == 1 })
	t.Logf("the wait for the Job (10m) ended %s after the stop", took.Round(time.Microsecond))
	if took > 5*time.Second {
		t.Errorf("the wait ended %s after the stop, want at once", took)
	}
	if !r.Stopped || r.Revert == nil {
		t.Fatalf("a stopped wait answered Stopped=%v revert data %+v (%v)", r.Stopped, r.Revert, r.Diagnostics)
	}
	contains(t, "the answer", fmt.Sprint(r.Diagnostics.Err()), "Stopped While Waiting", "Job "+ns+"/restore is created and runs", "its completion was not waited for")
	contains(t, "the log", log, "created Job "+ns+"/restore", "keeps running; the next run waits for it")
	if got := k.jobs(t, ns); len(got) != 1 {
		t.Errorf("after the stop the namespace has jobs %v, want the one left running", got)
	}
}

// TestReleaseWaitStopped: a gentle stop ends a release's wait for its
// workloads at once, the revision installed: Stopped, with the revert data
// that uninstalls it and what was not waited for.
func TestReleaseWaitStopped(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "relstop")
	cfg := obj(map[string]cty.Value{"name": str("web"), "chart": str("charts/wait"), "namespace": str(ns), "timeout": str("10m"),
		"values": obj(map[string]cty.Value{"nodeSelector": obj(map[string]cty.Value{"migrate.test/nowhere": str("true")})})})
	r, log, took := stoppedApply(t, p, helm.Release, "web", cfg, func() bool { return strings.HasPrefix(k.history(t, ns, "web"), "1:") })
	t.Logf("the release's wait (10m) ended %s after the stop", took.Round(time.Microsecond))
	if took > 5*time.Second {
		t.Errorf("the wait ended %s after the stop, want at once", took)
	}
	if !r.Stopped || r.Revert == nil {
		t.Fatalf("a stopped wait answered Stopped=%v revert data %+v (%v)", r.Stopped, r.Revert, r.Diagnostics)
	}
	contains(t, "the answer", fmt.Sprint(r.Diagnostics.Err()), "Stopped While Waiting", "revision 1 of release "+ns+"/web is installed", "its workloads becoming ready was not waited for")
	contains(t, "the log", log, "waiting up to 10m for the 1 object(s) of release "+ns+"/web")
	revert(t, p, helm.Release, "web", cfg, r.Revert)
}
