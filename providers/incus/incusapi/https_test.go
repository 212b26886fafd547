package incusapi

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestHTTPSClientCert(t *testing.T) {
	sock := socketClient(t)
	certPEM, keyPEM := trustedCert(t, sock)
	c, err := New(Options{URL: "https://" + testHTTPS, ClientCert: certPEM, ClientKey: keyPEM, ServerCert: serverCertPEM(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t, 2*time.Minute)
	s, err := c.Server(ctx)
	if err != nil || s.Auth != "trusted" {
		t.Fatalf("Server over HTTPS: %+v %v", s, err)
	}
	fp, _ := CertificateFingerprint(serverCertPEM(t))
	if s.Environment.CertificateFingerprint != fp {
		t.Fatalf("server fingerprint %q, pinned %q", s.Environment.CertificateFingerprint, fp)
	}

	// The whole path over HTTPS: create, operations, state, delete.
	name := launch(t, c, "iapi-https", true, nil)
	// Forced: a container stopped the instant it started may not have
	// its init's signal handling up yet, and a graceful stop then waits
	// out its timeout (seen under load). This test is about HTTPS.
	if err := c.SetState(ctx, name, InstanceStatePut{Action: "stop", Timeout: 30, Force: true}); err != nil {
		t.Fatalf("stop over HTTPS: %v", err)
	}
	err = c.SetState(ctx, name, InstanceStatePut{Action: "stop", Timeout: 30})
	if !IsAlreadyInState(err) {
		t.Fatalf("operation failure over HTTPS: %v", err)
	}
	inst, _, err := c.Instance(ctx, name)
	if err != nil || inst.Status != "Stopped" {
		t.Fatalf("Instance over HTTPS: %+v %v", inst, err)
	}
	if err := c.DeleteInstance(ctx, name); err != nil {
		t.Fatalf("delete over HTTPS: %v", err)
	}
}

func TestHTTPSUntrusted(t *testing.T) {
	certPEM, keyPEM := selfSigned(t, "stranger")
	c, err := New(Options{URL: "https://" + testHTTPS, ClientCert: certPEM, ClientKey: keyPEM, ServerCert: serverCertPEM(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t, 30*time.Second)
	s, err := c.Server(ctx)
	var ue *UntrustedError
	if !errors.As(err, &ue) || s == nil || s.Auth != "untrusted" ||
		!strings.Contains(err.Error(), "incus config trust add-certificate") {
		t.Fatalf("Server with an untrusted cert: %+v %v", s, err)
	}
	t.Logf("GET /1.0: %v", err)
	fp, _ := CertificateFingerprint(certPEM)
	if ue.Fingerprint != fp || !strings.Contains(err.Error(), fp) {
		t.Fatalf("fingerprint in the error: %q, want %q", ue.Fingerprint, fp)
	}
	_, err = c.Instances(ctx)
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "incus config trust add-certificate") {
		t.Fatalf("Instances with an untrusted cert: %v", err)
	}
	t.Logf("GET /1.0/instances: %v", err)
	if err := c.SetState(ctx, "whatever", InstanceStatePut{Action: "stop"}); !errors.As(err, &ue) {
		t.Fatalf("SetState with an untrusted cert: %v", err)
	}

	// No client certificate at all.
	c2, err := New(Options{URL: "https://" + testHTTPS, ServerCert: serverCertPEM(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Instances(ctx); !errors.As(err, &ue) || !strings.Contains(err.Error(), "no client certificate") {
		t.Fatalf("no client cert: %v", err)
	} else {
		t.Logf("no client cert: %v", err)
	}
}

func TestHTTPSWrongServerCert(t *testing.T) {
	sock := socketClient(t)
	certPEM, keyPEM := trustedCert(t, sock)
	wrong, _ := selfSigned(t, "127.0.0.1")
	c, err := New(Options{URL: "https://" + testHTTPS, ClientCert: certPEM, ClientKey: keyPEM, ServerCert: wrong})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Server(ctxT(t, 10*time.Second))
	var ce *ServerCertError
	wantFP, _ := CertificateFingerprint(wrong)
	gotFP, _ := CertificateFingerprint(serverCertPEM(t))
	if !errors.As(err, &ce) || ce.Expected != wantFP || ce.Got != gotFP || !strings.Contains(err.Error(), "pinned") {
		t.Fatalf("wrong pinned cert: %v", err)
	}
	t.Logf("wrong pin: %v", err)

	// No pin at all: the daemon's self-signed certificate is not trusted by the system.
	c2, err := New(Options{URL: "https://" + testHTTPS, ClientCert: certPEM, ClientKey: keyPEM})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Server(ctxT(t, 10*time.Second)); !errors.As(err, &ce) {
		t.Fatalf("no pin: %v", err)
	} else {
		t.Logf("no pin: %v", err)
	}
}
