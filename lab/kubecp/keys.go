package kubecp

import (
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
)

// EncryptionKeys are the keys a machine config gives the API server for
// Secrets at rest (Config.SecretboxKey, Config.AESCBCKey): Talos 1.13's
// cluster.secretboxEncryptionSecret and aescbcEncryptionSecret, or the
// keys of 1.14's etcd encryption document (an EncryptionConfiguration,
// its secretbox and aescbc providers' first keys).
func EncryptionKeys(cfg coreconfig.Config) (secretbox, aescbc string) {
	if c := cfg.Cluster(); c != nil {
		secretbox, aescbc = c.SecretboxEncryptionSecret(), c.AESCBCEncryptionSecret()
	}
	if secretbox != "" || aescbc != "" {
		return secretbox, aescbc
	}
	enc := cfg.K8sEtcdEncryptionConfig()
	if enc == nil {
		return "", ""
	}
	resources, _ := enc.EtcdEncryptionConfig()["resources"].([]any)
	for _, r := range resources {
		providers, _ := asMap(r)["providers"].([]any)
		for _, p := range providers {
			pm := asMap(p)
			for name, key := range map[string]*string{"secretbox": &secretbox, "aescbc": &aescbc} {
				if *key != "" {
					continue
				}
				keys, _ := asMap(pm[name])["keys"].([]any)
				if len(keys) > 0 {
					*key, _ = asMap(keys[0])["secret"].(string)
				}
			}
		}
	}
	return secretbox, aescbc
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
