package incushost_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

const image = "busybox"

// lab starts a lab host on a socket in a temp dir, with the busybox image.
func lab(t *testing.T, opts incushost.Options) (*incushost.Server, *incusapi.Client) {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	opts.Logf = t.Logf
	s, err := incushost.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tree := t.TempDir()
	if err := incushost.Busybox(tree); err != nil {
		t.Fatal(err)
	}
	if err := s.ImportImage(image, tree); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(opts.Dir, "unix.socket")
	if err := s.Listen(sock); err != nil {
		t.Fatal(err)
	}
	c, err := incusapi.New(incusapi.Options{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return s, c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func launch(t *testing.T, c *incusapi.Client, name string, start bool) {
	t.Helper()
	err := c.CreateInstance(ctxT(t), incusapi.InstancesPost{Name: name, Type: "container", Start: start,
		Source: incusapi.InstanceSource{Type: "image", Alias: image}})
	if err != nil {
		t.Fatalf("CreateInstance %s: %v", name, err)
	}
}

// run runs a command in an instance and returns its exit code and output.
func run(t *testing.T, c *incusapi.Client, name string, argv ...string) (int, string, string) {
	t.Helper()
	e, err := c.StartExec(ctxT(t), name, incusapi.ExecPost{Command: argv})
	if err != nil {
		t.Fatalf("exec %v in %s: %v", argv, name, err)
	}
	var out, errb bytes.Buffer
	code, err := c.FollowExec(ctxT(t), e, &out, &errb, 20*time.Millisecond)
	if err != nil {
		t.Fatalf("exec %v in %s: %v", argv, name, err)
	}
	return code, out.String(), errb.String()
}

func clientCert(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "lab test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}
