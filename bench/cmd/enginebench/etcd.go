package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// cluster is a loopback etcd cluster of real etcd processes, each with its
// data directory under the bench's temporary directory.
type cluster struct {
	procs     []*exec.Cmd
	endpoints []string
}

// etcdBinary is $MIGRATE_ETCD_BIN, or the newest etcd built by
// lab/kubecp/build-kube.sh (make services) in ~/.cache/migrate.
func etcdBinary() (string, error) {
	if p := os.Getenv("MIGRATE_ETCD_BIN"); p != "" {
		return p, nil
	}
	home, _ := os.UserHomeDir()
	found, _ := filepath.Glob(filepath.Join(home, ".cache", "migrate", "kube-v*", "etcd"))
	if len(found) == 0 {
		return "", errors.New("no etcd binary: run `make services` (it builds one into ~/.cache/migrate) or set MIGRATE_ETCD_BIN")
	}
	sort.Strings(found)
	return found[len(found)-1], nil
}

// freePorts returns n loopback ports free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startCluster starts members etcd processes and waits until each says it
// is healthy (which needs a leader, so a quorum).
func startCluster(dir string, members int) (*cluster, error) {
	bin, err := etcdBinary()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * members)
	if err != nil {
		return nil, err
	}
	var peers []string
	for i := range members {
		peers = append(peers, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i+1]))
	}
	c := &cluster{}
	for i := range members {
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("etcd-m%d.log", i)))
		if err != nil {
			c.stop()
			return nil, err
		}
		cmd := exec.Command(bin,
			"--name", fmt.Sprintf("m%d", i),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("etcd-m%d", i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(peers, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", "enginebench",
			"--log-level", "warn")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			logf.Close()
			c.stop()
			return nil, fmt.Errorf("starting %s: %w", bin, err)
		}
		logf.Close() // the child has it
		c.procs = append(c.procs, cmd)
		c.endpoints = append(c.endpoints, fmt.Sprintf("127.0.0.1:%d", ports[2*i]))
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, ep := range c.endpoints {
		for !healthy(ep) {
			if time.Now().After(deadline) {
				c.stop()
				return nil, fmt.Errorf("etcd at %s not healthy after 60s (logs in %s)", ep, dir)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return c, nil
}

func healthy(endpoint string) bool {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + endpoint + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"health":"true"`)
}

// url is the --backend URL of a state under prefix.
func (c *cluster) url(prefix string) string {
	return "etcd://" + strings.Join(c.endpoints, ",") + "/" + prefix + "/"
}

func (c *cluster) stop() {
	for _, p := range c.procs {
		p.Process.Kill()
		p.Wait()
	}
}
