// Package scaffold writes a new runbook directory for a host that
// package inventory has read: examples/homelab's runbook (the rehearsal
// and the five phases) with the host's names in site.auto.hcl, its own
// age recipients and fresh secrets, and a TODO wherever only the user can
// decide. It is what `migrate init DIR` writes.
//
//	files, _ := scaffold.Render(scaffold.Input{Site: site, Findings: fs, Recipients: rs, Talos: gen, ...})
//	_ = scaffold.Write(dir, files) // refuses a directory that is not empty
//
// Render makes every file in memory first (the secrets sealed as they are
// made, never in clear on disk), so that a failure writes nothing. Write
// refuses a directory that is not empty and creates each file with
// O_EXCL: it never overwrites a file, and on a failure it removes what it
// created, leaving the directory as it found it.
//
// What it writes:
//
//	main.hcl, charts/, manifests/, patches/, examples/homelab's, the steps
//	scripts/, groups/                        a finding concerns marked TODO
//	                                         (a grouped one before its group
//	                                         call), those of a role the host
//	                                         lacks (Site.Omit) commented out,
//	                                         the incus provider in
//	                                         Input.Project (not moved.hcl:
//	                                         a new runbook has no history)
//	site.auto.hcl                            the host's names (variables)
//	.age-recipients                          whom the secrets are sealed to
//	secrets/secrets.yaml.age                 a new Talos secrets bundle
//	secrets/talosconfig.age                  its administrator's talosconfig
//	secrets/ci-runner-token.age              a placeholder token (TODO)
//	secrets.auto.hcl.age                     the new homeserver's registration secret
//	secrets/README.md, .gitignore
package scaffold
