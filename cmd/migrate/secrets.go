package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
	"github.com/homelab-migrate/migrate/secret/agefile"
	"github.com/homelab-migrate/migrate/state"
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
			if err := writeFile(path+agefile.Ext, sealed, false); err != nil {
				return err
			}
			a.view().Note("Wrote %s, sealed to %d recipient(s).", path+agefile.Ext, len(rs))
			if rm {
				if err := shred(path); err != nil {
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

// editSecret is secrets edit: the clear text exists only in memory and in
// a 0600 file in a 0700 directory, removed whatever happens.
func (a *app) editSecret(path string, recipientFlags []string) error {
	sealed, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !agefile.IsEncrypted(sealed) { // age's error would quote its start
		return fmt.Errorf("%s is not age-encrypted: encrypt it first with migrate secrets encrypt", path)
	}
	rs, err := a.recipients(recipientFlags)
	if err != nil {
		return err
	}
	ids, err := agefile.Identities("")
	if err != nil {
		return err
	}
	clear, err := agefile.Decrypt(sealed, ids...)
	if err != nil {
		return fmt.Errorf("decrypting %s: %w", path, err)
	}
	base := clearCopyBase()
	for _, left := range sweepEdits(base) {
		a.view().Warn("Removed %s: the clear copy of an edit whose migrate was killed.", left)
	}
	tmpDir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", editDirPrefix, os.Getpid())) // 0700
	if err != nil {
		return err
	}
	defer shredTree(tmpDir)
	// migrate must live to remove the file: the signals that would stop
	// it stay caught until it exits. Ctrl-C reaches the editor too, whose
	// terminal it is, and the editor decides; SIGTERM and SIGHUP are
	// passed on to it, and what it leaves is not saved.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, stopSignals()...)

	tmp := filepath.Join(tmpDir, strings.TrimSuffix(filepath.Base(path), agefile.Ext))
	if err := os.WriteFile(tmp, clear, 0o600); err != nil {
		return err
	}
	if err := runEditor(tmp, path, sigs); err != nil {
		return err
	}
	edited, err := os.ReadFile(tmp)
	if err != nil {
		return err
	}
	if bytes.Equal(edited, clear) {
		a.view().Note("No change: %s is left as it was.", path)
		return nil
	}
	if name := strings.TrimSuffix(path, agefile.Ext); strings.HasSuffix(name, ".hcl") {
		if err := checkVarFile(edited, filepath.Base(path)); err != nil {
			return err
		}
	}
	resealed, err := agefile.Encrypt(edited, !bytes.HasPrefix(bytes.TrimLeft(sealed, " \t\r\n"), []byte("age-encryption.org/")), rs...)
	if err != nil {
		return err
	}
	if err := writeFile(path, resealed, true); err != nil {
		return err
	}
	a.view().Note("Saved %s, sealed to %d recipient(s).", path, len(rs))
	return nil
}

// editDirPrefix names the private directories of secrets edit. The PID
// of the migrate that made one follows, so that a later edit can tell a
// directory whose migrate was killed (kill -9 runs no clean-up) and
// remove the clear copy it left.
const editDirPrefix = "migrate-edit-"

// clearCopyBase is where an edit's clear copy goes: memory, not disk,
// where there is one ($XDG_RUNTIME_DIR, else /dev/shm), so that a copy a
// killed migrate left is gone at the next boot at the latest.
func clearCopyBase() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return d
	}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() && unix.Access("/dev/shm", unix.W_OK) == nil {
		return "/dev/shm"
	}
	return os.TempDir()
}

// sweepEdits removes the edit directories in base of this user whose
// migrate is dead, and returns their paths.
func sweepEdits(base string) []string {
	dirs, _ := filepath.Glob(filepath.Join(base, editDirPrefix+"*"))
	var removed []string
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(d), editDirPrefix), "-", 2)[0])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(d, &st) != nil || st.Uid != uint32(os.Getuid()) || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			continue // alive (or not ours to ask): an edit in progress
		}
		shredTree(d)
		removed = append(removed, d)
	}
	return removed
}

// shredTree shreds every regular file under dir (the clear copy, and an
// editor's swap or backup files beside it), then removes dir.
func shredTree(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			shred(p)
		}
		return nil
	})
	os.RemoveAll(dir)
}

// runEditor runs the editor on file, the clear text of the sealed path,
// passing on the signals of sigs but Ctrl-C (the editor has it from its
// terminal).
func runEditor(file, path string, sigs <-chan os.Signal) error {
	editor := editorCommand()
	cmd := exec.Command(editor[0], append(editor[1:], file)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = providers.Environ()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the editor %s: %w ($EDITOR names it)", editor[0], err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				if sig != os.Interrupt {
					cmd.Process.Signal(sig)
				}
			}
		}
	}()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("the editor %s failed (%v): %s is left as it was", editor[0], err, path)
	}
	return nil
}

// editorCommand is $EDITOR, else $VISUAL, else vi, split on spaces
// ("code --wait").
func editorCommand() []string {
	for _, k := range []string{"EDITOR", "VISUAL"} {
		if f := strings.Fields(os.Getenv(k)); len(f) > 0 {
			return f
		}
	}
	return []string{"vi"}
}

// checkVarFile refuses an edited variables file that does not parse. The
// problems name the file and line, never the clear text.
func checkVarFile(src []byte, name string) error {
	f, diags := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	if !diags.HasErrors() {
		_, diags = f.Body.JustAttributes()
	}
	if !diags.HasErrors() {
		return nil
	}
	var lines []string
	for _, d := range diags {
		if d.Severity == hcl.DiagError && d.Subject != nil {
			lines = append(lines, fmt.Sprintf("%s:%d: %s", name, d.Subject.Start.Line, d.Summary))
		}
	}
	return fmt.Errorf("the edited file is not valid HCL, so it was not saved and the previous one is kept:\n  %s", strings.Join(lines, "\n  "))
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
			var files []newFile
			for _, f := range []newFile{{out, bundle}, {tcOut, tc}} {
				sealed, err := agefile.Encrypt(f.body, true, rs...)
				if err != nil {
					return err
				}
				files = append(files, newFile{f.path, sealed})
			}
			for _, f := range files {
				if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
					return err
				}
			}
			if err := writeNew(files...); err != nil {
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
			if err := writeFile(path, []byte(body), false); err != nil {
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

// writeFile writes b to path 0600 through a temporary file beside it, so
// that path is either the old file or the new one; without replace it
// fails when path exists.
func writeFile(path string, b []byte, replace bool) error {
	if !replace {
		return writeNew(newFile{path, b})
	}
	return state.WriteFile(path, b) // as the state's snapshot is replaced
}

// newFile is a file writeNew writes.
type newFile struct {
	path string
	body []byte
}

// writeNew writes files 0600, each new (never replacing one), all or
// none: each is written and synced to a temporary file beside it first,
// then linked in place; when one cannot be, those linked before it are
// removed again.
func writeNew(files ...newFile) error {
	var tmps, linked []string
	defer func() {
		for _, t := range tmps {
			os.Remove(t)
		}
	}()
	for _, f := range files {
		tmp, err := writeTemp(f.path, f.body)
		if err != nil {
			return err
		}
		tmps = append(tmps, tmp)
	}
	for i, f := range files {
		if err := os.Link(tmps[i], f.path); err != nil {
			for _, l := range linked {
				os.Remove(l)
			}
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%s exists already: not overwriting it (nothing was written)", f.path)
			}
			return err
		}
		linked = append(linked, f.path)
	}
	for _, f := range files {
		if err := syncDir(filepath.Dir(f.path)); err != nil {
			return err
		}
	}
	return nil
}

// writeTemp writes b to a new 0600 temporary file beside path, synced,
// and returns its name.
func writeTemp(path string, b []byte) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return "", err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// syncDir makes a rename or link in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// shred overwrites a file with zeros before removing it: on most file
// systems the clear bytes do not survive in the freed blocks.
func shred(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
		f.Write(make([]byte, fi.Size()))
		f.Sync()
		f.Close()
	}
	return os.Remove(path)
}
