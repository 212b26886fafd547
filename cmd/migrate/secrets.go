package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"
	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
	"github.com/homelab-migrate/migrate/secret/agefile"
	"github.com/homelab-migrate/migrate/secret/edit"
)

// secretsCommand groups the commands that keep secrets beside a runbook
// encrypted with age: what git-crypt users did with a filter, by hand.
func (a *app) secretsCommand() *cobra.Command {
	var recipients []string
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Encrypt, edit and generate the age-encrypted files beside a runbook",
		Long: `Files ending in .age beside a runbook are sealed with age to the recipients
listed in DIR/.age-recipients (one age1... per line), or to --recipient.
They are opened with the identity in $MIGRATE_AGE_IDENTITY or --age-identity.`,
	}
	cmd.PersistentFlags().StringArrayVar(&recipients, "recipient", nil, "seal to this age `RECIPIENT` (age1..., repeatable) instead of DIR/.age-recipients")
	cmd.AddCommand(a.secretsEncryptCommand(&recipients), a.secretsEditCommand(&recipients), a.secretsGenCommand(&recipients))
	return cmd
}

// recipients are --recipient, else those of the runbook directory.
func (a *app) recipients(flags []string) ([]age.Recipient, error) {
	if len(flags) == 0 {
		dir, err := a.dir()
		if err != nil {
			return nil, err
		}
		return agefile.RunbookRecipients(dir)
	}
	var rs []age.Recipient
	for _, s := range flags {
		r, err := age.ParseX25519Recipient(s)
		if err != nil {
			return nil, fmt.Errorf("--recipient %q: %w", s, err)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

func (a *app) secretsEncryptCommand(recipients *[]string) *cobra.Command {
	var rm bool
	cmd := &cobra.Command{
		Use:   "encrypt FILE",
		Short: "Write FILE.age, FILE sealed to the recipients",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			path := args[0]
			rs, err := a.recipients(*recipients)
			if err != nil {
				return err
			}
			clear, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if agefile.IsEncrypted(clear) {
				return fmt.Errorf("%s is already age-encrypted", path)
			}
			sealed, err := agefile.Encrypt(clear, true, rs...)
			if err != nil {
				return err
			}
			if err := edit.WriteFile(path+agefile.Ext, sealed, false); err != nil {
				return err
			}
			a.view().Note("Wrote %s, sealed to %d recipient(s).", path+agefile.Ext, len(rs))
			if rm {
				if err := edit.Shred(path); err != nil {
					return err
				}
				a.view().Note("Removed %s.", path)
				return nil
			}
			a.view().Note("%s is still there in clear: delete it (shred -u %s), and keep it out of git.", path, path)
			return nil
		},
	}
	cmd.Flags().BoolVar(&rm, "rm", false, "overwrite and remove the clear FILE once it is encrypted")
	return cmd
}

func (a *app) secretsEditCommand(recipients *[]string) *cobra.Command {
	return &cobra.Command{
		Use:   "edit FILE.age",
		Short: "Decrypt FILE.age to a private temporary file, run $EDITOR on it, and encrypt it again",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return a.editSecret(args[0], *recipients)
		},
	}
}

// editSecret is secrets edit (edit.Edit).
func (a *app) editSecret(path string, recipientFlags []string) error {
	// Refused before the recipients are looked for; edit.Edit is given
	// the bytes rather than reading the file again.
	sealed, err := edit.ReadSealed(path)
	if err != nil {
		return err
	}
	rs, err := a.recipients(recipientFlags)
	if err != nil {
		return err
	}
	ids, err := agefile.Identities("")
	if err != nil {
		return err
	}
	changed, err := edit.Edit(path, edit.Options{
		Recipients: rs, Identities: ids, Sealed: sealed,
		Signals: stopSignals(), Env: providers.Environ(),
		Swept: func(left string) {
			a.view().Warn("Removed %s: the clear copy of an edit whose migrate was killed.", left)
		},
	})
	switch {
	case err != nil:
		return err
	case !changed:
		a.view().Note("No change: %s is left as it was.", path)
	default:
		a.view().Note("Saved %s, sealed to %d recipient(s).", path, len(rs))
	}
	return nil
}

func (a *app) secretsGenCommand(recipients *[]string) *cobra.Command {
	gen := &cobra.Command{Use: "gen", Short: "Generate new secrets, written only encrypted"}
	var out, tcOut, version, context string
	talos := &cobra.Command{
		Use:   "talos",
		Short: "Generate a new Talos secrets bundle and its admin talosconfig, as talosctl gen secrets and gen config do, written only encrypted",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			rs, err := a.recipients(*recipients)
			if err != nil {
				return err
			}
			if out == "" || tcOut == "" {
				dir, err := a.dir()
				if err != nil {
					return err
				}
				out = cmp.Or(out, filepath.Join(dir, "secrets", "secrets.yaml.age"))
				tcOut = cmp.Or(tcOut, filepath.Join(dir, "secrets", "talosconfig.age"))
			}
			for _, p := range []string{out, tcOut} {
				if _, err := os.Stat(p); err == nil {
					return fmt.Errorf("%s exists: a new bundle would replace the cluster's keys (and its talosconfig would no longer match); remove both first if that is what you want", p)
				}
			}
			bundle, tc, err := a.genTalosSecrets(version, context)
			if err != nil {
				return err
			}
			// Both files or neither: a bundle without its talosconfig
			// (or the reverse) is a pair that no longer matches.
			var files []edit.NewFile
			for _, f := range []edit.NewFile{{Path: out, Body: bundle}, {Path: tcOut, Body: tc}} {
				sealed, err := agefile.Encrypt(f.Body, true, rs...)
				if err != nil {
					return err
				}
				files = append(files, edit.NewFile{Path: f.Path, Body: sealed})
			}
			for _, f := range files {
				if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
					return err
				}
			}
			if err := edit.WriteNew(files...); err != nil {
				return err
			}
			a.view().Note("Wrote a new Talos secrets bundle to %s and its admin talosconfig (context %q) to %s, sealed to %d recipient(s).", out, context, tcOut, len(rs))
			return nil
		},
	}
	talos.Flags().StringVar(&out, "out", "", "the encrypted `FILE` to write the bundle to (default DIR/secrets/secrets.yaml.age)")
	talos.Flags().StringVar(&tcOut, "talosconfig-out", "", "the encrypted `FILE` to write the admin talosconfig to (default DIR/secrets/talosconfig.age)")
	talos.Flags().StringVar(&context, "context", "home", "the talosconfig's `CONTEXT` name")
	talos.Flags().StringVar(&version, "talos-version", "", "the Talos `VERSION` the bundle is for, such as v1.13.3 (default the talos provider's own)")
	gen.AddCommand(talos, a.secretsGenIdentityCommand())
	return gen
}

// secretsGenIdentityCommand makes an age identity, as age-keygen -o does,
// for a user who has no age tools: the file is new (never one replaced,
// which would lock out every secret sealed to it) and 0600; only its
// recipient is printed.
func (a *app) secretsGenIdentityCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "identity [FILE]",
		Short: "Generate a new age identity into FILE (default ~/.config/migrate/age.key), mode 0600, never replacing one, and print its recipient",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			path := ""
			if len(args) == 1 {
				path = args[0]
			} else {
				home, err := os.UserHomeDir()
				if err != nil {
					return fmt.Errorf("no FILE given and no home directory: %w", err)
				}
				path = filepath.Join(home, ".config", "migrate", "age.key")
			}
			id, err := age.GenerateX25519Identity()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return err
			}
			body := fmt.Sprintf("# created: %s\n# public key: %s\n%s\n", time.Now().UTC().Format(time.RFC3339), id.Recipient(), id)
			if err := edit.WriteFile(path, []byte(body), false); err != nil {
				return err
			}
			a.view().Note("Wrote a new age identity to %s (mode 0600: keep it, and a copy somewhere safe; what is sealed to it opens with it alone). Its recipient, for .age-recipients and --recipient:\n%s", path, id.Recipient())
			return nil
		},
	}
}

// genTalosSecrets makes a new Talos secrets bundle for version ("": the
// talos provider's own) and the talosconfig of its administrator in
// tcContext, both in clear, in memory only. The talos program makes them
// (migrate does not carry Talos's libraries), checked and introduced as
// when it runs a provider (plugin.Run); they come back through a pipe.
func (a *app) genTalosSecrets(version, tcContext string) (bundle, talosconfig []byte, err error) {
	prog := talosPlugin()
	found, err := plugin.Check(prog)
	if err != nil {
		return nil, nil, err
	}
	a.view().UnverifiedProgram(found)
	args := []string{talosschema.GenSecretsArg}
	if version != "" {
		args = append(args, version)
	}
	ctx := context.Background()
	if bundle, err = plugin.Run(ctx, prog, nil, args...); err != nil {
		return nil, nil, fmt.Errorf("generating the secrets bundle: %w", err)
	}
	if talosconfig, err = plugin.Run(ctx, prog, bundle, talosschema.GenTalosconfigArg, tcContext); err != nil {
		return nil, nil, fmt.Errorf("generating the talosconfig: %w", err)
	}
	return bundle, talosconfig, nil
}

// talosPlugin is the talos provider's program.
func talosPlugin() plugin.Program {
	for _, p := range pluginPrograms {
		if p.Name == talosschema.TypeName {
			return p
		}
	}
	panic("no talos program in pluginPrograms") // registry.go lists it
}
