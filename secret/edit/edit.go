package edit

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"

	"filippo.io/age"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"golang.org/x/sys/unix"

	"github.com/homelab-migrate/migrate/secret/agefile"
)

// Options are what an edit takes from its caller.
type Options struct {
	// Recipients the edited file is sealed to.
	Recipients []age.Recipient
	// Identities that open the file.
	Identities []age.Identity
	// Signals that would stop the caller: they stay caught while the
	// clear copy exists. Ctrl-C (os.Interrupt) is left to the editor,
	// whose terminal it is; the others are passed on to it.
	Signals []os.Signal
	// Env is the editor's environment (nil: the caller's).
	Env []string
	// Swept is told of each clear copy an earlier, killed edit left and
	// this one removed.
	Swept func(path string)
	// Sealed is the file's bytes as ReadSealed returned them, when the
	// caller has read them already (nil: Edit reads path).
	Sealed []byte
}

// Edit is migrate secrets edit of the sealed file at path: the clear text
// exists only in memory and in a 0600 file in a 0700 directory, removed
// whatever happens. It reports whether the file changed; an edited
// variables file (NAME.hcl.age) that does not parse is refused and the
// file kept.
func Edit(path string, o Options) (changed bool, err error) {
	sealed := o.Sealed
	if sealed == nil {
		if sealed, err = ReadSealed(path); err != nil {
			return false, err
		}
	}
	clear, err := agefile.Decrypt(sealed, o.Identities...)
	if err != nil {
		return false, fmt.Errorf("decrypting %s: %w", path, err)
	}
	base := ClearCopyBase()
	for _, left := range Sweep(base) {
		if o.Swept != nil {
			o.Swept(left)
		}
	}
	tmpDir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", DirPrefix, os.Getpid())) // 0700
	if err != nil {
		return false, err
	}
	defer shredTree(tmpDir)
	// The caller must live to remove the file: the signals that would
	// stop it stay caught until it exits. SIGTERM and SIGHUP are passed
	// on to the editor, and what it leaves is not saved.
	sigs := make(chan os.Signal, 4)
	if len(o.Signals) > 0 {
		signal.Notify(sigs, o.Signals...)
	}

	tmp := filepath.Join(tmpDir, strings.TrimSuffix(filepath.Base(path), agefile.Ext))
	if err := os.WriteFile(tmp, clear, 0o600); err != nil {
		return false, err
	}
	if err := runEditor(tmp, path, o.Env, sigs); err != nil {
		return false, err
	}
	edited, err := os.ReadFile(tmp)
	if err != nil {
		return false, err
	}
	if bytes.Equal(edited, clear) {
		return false, nil
	}
	if name := strings.TrimSuffix(path, agefile.Ext); strings.HasSuffix(name, ".hcl") {
		if err := CheckVarFile(edited, filepath.Base(path)); err != nil {
			return false, err
		}
	}
	resealed, err := agefile.Encrypt(edited, agefile.IsArmored(sealed), o.Recipients...)
	if err != nil {
		return false, err
	}
	if err := WriteFile(path, resealed, true); err != nil {
		return false, err
	}
	return true, nil
}

// ReadSealed reads the sealed file at path, refusing one that is not
// age-encrypted.
func ReadSealed(path string) ([]byte, error) {
	sealed, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !agefile.IsEncrypted(sealed) { // age's error would quote its start
		return nil, fmt.Errorf("%s is not age-encrypted: encrypt it first with migrate secrets encrypt", path)
	}
	return sealed, nil
}

// DirPrefix names the private directories of an edit. The PID of the
// process that made one follows, so that a later edit can tell a
// directory whose migrate was killed (kill -9 runs no clean-up) and
// remove the clear copy it left.
const DirPrefix = "migrate-edit-"

// ClearCopyBase is where an edit's clear copy goes: memory, not disk,
// where there is one ($XDG_RUNTIME_DIR, else /dev/shm), so that a copy a
// killed migrate left is gone at the next boot at the latest.
func ClearCopyBase() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return d
	}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() && unix.Access("/dev/shm", unix.W_OK) == nil {
		return "/dev/shm"
	}
	return os.TempDir()
}

// Sweep removes the edit directories in base of this user whose process
// is dead, and returns their paths.
func Sweep(base string) []string {
	dirs, _ := filepath.Glob(filepath.Join(base, DirPrefix+"*"))
	var removed []string
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(d), DirPrefix), "-", 2)[0])
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
			Shred(p)
		}
		return nil
	})
	os.RemoveAll(dir)
}

// runEditor runs the editor on file, the clear text of the sealed path,
// passing on the signals of sigs but Ctrl-C (the editor has it from its
// terminal).
func runEditor(file, path string, env []string, sigs <-chan os.Signal) error {
	editor := editorCommand()
	cmd := exec.Command(editor[0], append(editor[1:], file)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
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

// CheckVarFile refuses an edited variables file that does not parse. The
// problems name the file and line, never the clear text.
func CheckVarFile(src []byte, name string) error {
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

// Shred overwrites a file with zeros before removing it: on most file
// systems the clear bytes do not survive in the freed blocks.
func Shred(path string) error {
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
