package runbooks_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/runbooks"
)

const backendRunbook = `
variable "etcd_password" {
  sensitive = true
}
variable "cluster" {}
locals {
  prefix = "migrate/${var.cluster}/"
}
backend "etcd" {
  endpoints = ["127.0.0.1:2379", "127.0.0.2:2379"]
  prefix    = local.prefix
  ca        = "pki/ca.pem"
  cert      = "/etc/migrate/client.pem"
  key       = "/etc/migrate/client-key.pem"
  username  = "migrate"
  password  = var.etcd_password
  lock_ttl  = "2s"
  insecure  = true
}
phase "one" {
  step "exec" "a" {
    command = ["true"]
  }
}
`

func TestBackendBlock(t *testing.T) {
	t.Parallel()
	rb := mustLoad(t, map[string]string{"main.hcl": backendRunbook}, runbooks.Options{
		Vars: []string{"etcd_password=s3cret-canary", "cluster=homelab"},
	})
	b := rb.Backend
	if b == nil {
		t.Fatal("no backend")
	}
	if b.Type != "etcd" || !slices.Equal(b.Endpoints, []string{"127.0.0.1:2379", "127.0.0.2:2379"}) ||
		b.Prefix != "migrate/homelab/" || b.CA != "/runbook/pki/ca.pem" || b.Cert != "/etc/migrate/client.pem" ||
		b.Key != "/etc/migrate/client-key.pem" || b.Username != "migrate" || b.Password != "s3cret-canary" ||
		b.LockTTL != 2*time.Second || !b.Insecure || len(b.Unknown) != 0 || b.Range.StartLine != 9 {
		t.Errorf("backend: %+v", b)
	}
	if !slices.Contains(rb.Secrets, "s3cret-canary") {
		t.Error("the password is not among the secrets to redact")
	}
}

// Without values (status, validate), the block is there but cannot be used.
func TestBackendBlockUnknown(t *testing.T) {
	t.Parallel()
	rb := mustLoad(t, map[string]string{"main.hcl": backendRunbook}, runbooks.Options{UnsetVarsUnknown: true})
	if rb.Backend == nil || !slices.Equal(rb.Backend.Unknown, []string{"password", "prefix"}) {
		t.Errorf("backend: %+v", rb.Backend)
	}
}

func TestNoBackendBlock(t *testing.T) {
	t.Parallel()
	rb := mustLoad(t, map[string]string{"main.hcl": `phase "one" {}`}, runbooks.Options{})
	if rb.Backend != nil {
		t.Errorf("backend: %+v", rb.Backend)
	}
	rb = mustLoad(t, map[string]string{"main.hcl": `backend "local" {}`}, runbooks.Options{})
	if rb.Backend == nil || rb.Backend.Type != "local" {
		t.Errorf("backend: %+v", rb.Backend)
	}
}

// A sensitive password is never quoted, even when it is wrong.
func TestBackendPasswordNotShown(t *testing.T) {
	t.Parallel()
	files := map[string]string{"main.hcl": `
variable "pw" {
  sensitive = true
  default   = ["s3cret-canary"]
}
backend "etcd" {
  endpoints = ["127.0.0.1:2379"]
  prefix    = "p/"
  username  = "u"
  password  = var.pw
  ca        = var.pw[0]
}
`}
	_, diags := load(t, files, runbooks.Options{})
	if !diags.HasErrors() {
		t.Fatal("no error")
	}
	for _, d := range diags {
		if strings.Contains(d.Detail+d.Summary, "s3cret-canary") {
			t.Errorf("the password is shown: %s: %s", d.Summary, d.Detail)
		}
	}
	if got := diags.Err().Error(); !strings.Contains(got, "password") || !strings.Contains(got, "ca") {
		t.Errorf("errors do not name the attributes: %s", got)
	}
}
