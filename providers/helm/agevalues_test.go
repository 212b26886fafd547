package helm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// TestEncryptedValuesFile: a values file sealed with age is decrypted in
// memory (the identity from MIGRATE_AGE_IDENTITY) and installed; its
// values are redacted in the plan though nothing marks them, an old
// revision's values at the same paths too; a clear file named .age and
// an encrypted file that is not YAML are refused without quoting it.
func TestEncryptedValuesFile(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.namespace(t, "agevalues")
	dir := t.TempDir()
	seal := func(name, clear string) string {
		b, err := agefile.Encrypt([]byte(clear), true, canaryIdentity.Recipient())
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	release := func(files ...string) cty.Value {
		var fs []cty.Value
		for _, f := range files {
			fs = append(fs, str(f))
		}
		return obj(map[string]cty.Value{"name": str("app"), "chart": str("charts/app"), "namespace": str(ns),
			"create_namespace": cty.True, "values_files": cty.ListVal(fs)})
	}
	const first, second = "first-Wq4Ze8Rt", "second-Lp2Xc7Vn"
	v1 := release(seal("one.yaml.age", "message: "+first+"\nreplicas: 0\n"))
	r := mustPlan(t, p, helm.Release, "app", v1)
	if strings.Contains(r.Diff, first) || !strings.Contains(r.Diff, phases.Redacted) {
		t.Errorf("the install plan shows the encrypted value, or no redaction:\n%s", r.Diff)
	}
	mustApply(t, p, helm.Release, "app", v1, nil)
	cm, err := k.client.CoreV1().ConfigMaps(ns).Get(context.Background(), "app-config", metav1.GetOptions{})
	if err != nil || cm.Data["message"] != first {
		t.Fatalf("the decrypted value was not installed: %v %v", cm.Data, err)
	}
	// The upgrade's diff shows neither the new nor the deployed value.
	v2 := release(seal("two.yaml.age", "message: "+second+"\nreplicas: 0\n"))
	r = mustPlan(t, p, helm.Release, "app", v2)
	if strings.Contains(r.Diff, first) || strings.Contains(r.Diff, second) || !strings.Contains(r.Diff, "ConfigMap "+ns+"/app-config (changed)") {
		t.Errorf("the upgrade plan:\n%s", r.Diff)
	}

	plain := filepath.Join(dir, "plain.yaml.age")
	os.WriteFile(plain, []byte("message: oops\n"), 0o600)
	if r := plan(t, p, helm.Release, "app", release(plain)); !strings.Contains(r.Diagnostics.Err().Error(), "not age-encrypted") {
		t.Errorf("a clear file named .age: %v", r.Diagnostics.Err())
	}
	bad := seal("bad.yaml.age", "message: ok\n  broken: [Jh5Nm2Qs\n")
	r = plan(t, p, helm.Release, "app", release(bad))
	if err := r.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "bad.yaml.age:") || strings.Contains(err.Error(), "Jh5Nm2Qs") || strings.Contains(err.Error(), "broken") {
		t.Errorf("an encrypted file that is not YAML: %v (want its line, not its content)", err)
	}
}
