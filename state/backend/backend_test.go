package backend

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	wd, _ := os.Getwd()
	b, err := Parse("etcd://127.0.0.1:2379,127.0.0.2:2379/migrate/homelab/?ca=/p/ca.pem&cert=c.pem&key=/p/k.pem&user=name&lock_ttl=30s", "--backend")
	if err != nil {
		t.Fatal(err)
	}
	if b.Type != "etcd" || !slices.Equal(b.Endpoints, []string{"127.0.0.1:2379", "127.0.0.2:2379"}) || b.Prefix != "migrate/homelab/" ||
		b.CA != "/p/ca.pem" || b.Cert != filepath.Join(wd, "c.pem") || b.Key != "/p/k.pem" || b.Username != "name" ||
		b.LockTTL != 30*time.Second || b.Password != "" {
		t.Errorf("%+v", b)
	}
	if b.Insecure {
		t.Error("insecure without being asked")
	}
	if b, err := Parse("etcd://u@h:1/p/?insecure=true", "x"); err != nil || !b.Insecure {
		t.Errorf("insecure=true: %+v %v", b, err)
	}
	if b, err := Parse("etcd://u@h:1/p/", "x"); err != nil || b.Username != "u" || b.Prefix != "p/" {
		t.Errorf("%+v %v", b, err)
	}
	if b, err := Parse("local", "x"); err != nil || b.Type != "local" || b.Path != "" {
		t.Errorf("%+v %v", b, err)
	}
	if b, err := Parse("local:st", "x"); err != nil || b.Type != "local" || b.Path != filepath.Join(wd, "st") {
		t.Errorf("%+v %v", b, err)
	}
	for url, want := range map[string]string{
		"etcd://u:s3cret-canary@h:1/p/":        "MIGRATE_ETCD_PASSWORD",
		"etcd://h:1/p/?password=s3cret-canary": "MIGRATE_ETCD_PASSWORD",
		"etcd://h:1":                           "no key prefix",
		"etcd://h:1,/p/":                       "empty endpoint",
		"etcd://h:1/p/?lock_ttl=10ms":          "at least 2s",
		"etcd://h:1/p/?cert=c.pem":             "both cert and key",
		"etcd://h:1/p/?colour=blue":            `unknown parameter "colour"`,
		"etcd://h:1/p/?insecure=maybe":         "want true or false",
		"consul://h:1/p/":                      `unknown backend "consul"`,
		"local:":                               "needs a directory",
	} {
		_, err := Parse(url, "--backend")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "--backend: ") {
			t.Errorf("%s: want an error with %q, got %v", url, want, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret-canary") {
			t.Errorf("%s: the error shows the password: %v", url, err)
		}
	}
}
