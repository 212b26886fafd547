package kubecp

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// Secrets at rest: Talos gives kube-apiserver an EncryptionConfiguration
// for secrets with the secretbox provider (key cluster.secretboxEncryptionSecret),
// then aescbc (cluster.aescbcEncryptionSecret, the key of older configs:
// what they wrote stays readable), then identity (what was written before
// encryption was on). The first provider encrypts what is written.

// encryptionConfig is the API server's --encryption-provider-config for
// the machine config's keys, each checked (32 bytes of base64) so that a
// bad one is told here, not as the API server failing to start.
func encryptionConfig(secretbox, aescbc string) ([]byte, error) {
	var b strings.Builder

	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources:\n  - secrets\n  providers:\n")

	for _, k := range []struct{ provider, name, field, secret string }{
		{"secretbox", "key2", "cluster.secretboxEncryptionSecret", secretbox},
		{"aescbc", "key1", "cluster.aescbcEncryptionSecret", aescbc},
	} {
		if k.secret == "" {
			continue
		}

		if raw, err := base64.StdEncoding.DecodeString(k.secret); err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("kubecp: the machine config's %s is not 32 bytes in base64: give a key made by `head -c 32 /dev/urandom | base64`", k.field)
		}

		fmt.Fprintf(&b, "  - %s:\n      keys:\n      - name: %s\n        secret: %q\n", k.provider, k.name, k.secret)
	}

	b.WriteString("  - identity: {}\n")

	return []byte(b.String()), nil
}
