package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/homelab-migrate/migrate/providers"
)

// PluginDirEnv names the directory looked in first for provider programs.
const PluginDirEnv = "MIGRATE_PLUGIN_DIR"

// Found is a provider program located and checked: its file is open, and
// its sum was read from that open file, which is the one that runs
// (start), so that a file replaced after the check is not what runs.
type Found struct {
	providers.Program
	file *os.File
}

// Close releases the program's file; start closes it too.
func (f *Found) Close() error { return f.file.Close() }

// Check locates p's program and checks it as Find does, without keeping
// it open: what a plan or migrate version says of it.
func Check(p Program) (providers.Program, error) {
	f, err := Find(p)
	if err != nil {
		return providers.Program{}, err
	}
	f.Close()
	return f.Program, nil
}

// Find locates p's program (Locate) and checks it: neither the file nor
// its directory writable by its group or by everyone, and its sha256 the
// one p records (Sum). The file stays open for start.
func Find(p Program) (*Found, error) {
	path, err := locate(p)
	if err != nil {
		return nil, err
	}
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the %s provider's program: %w", p.Name, err)
	}
	sum, err := checkFile(file, path)
	if err != nil {
		file.Close()
		return nil, err
	}
	if p.Sum != "" && sum != p.Sum {
		file.Close()
		return nil, fmt.Errorf("%s is not the %s provider's program this migrate was built with: its sha256 is %s, this migrate recorded %s. "+
			"Build migrate and its provider programs together with `make build`, and use the migrate beside them", path, p.Name, sum, p.Sum)
	}
	return &Found{Program: providers.Program{Provider: p.Name, Path: path, SHA256: sum, Verified: p.Sum != ""}, file: file}, nil
}

// checkFile refuses a program others could replace or rewrite, and
// returns the sha256 of what the open file holds.
func checkFile(file *os.File, path string) (string, error) {
	fi, err := file.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file (mode %s)", path, fi.Mode())
	}
	if err := notShared(path, fi.Mode()); err != nil {
		return "", err
	}
	dirs := []string{filepath.Dir(path)}
	if real, err := filepath.EvalSymlinks(path); err == nil && filepath.Dir(real) != dirs[0] {
		dirs = append(dirs, filepath.Dir(real))
	}
	for _, d := range dirs {
		di, err := os.Stat(d)
		if err != nil {
			return "", err
		}
		if err := notShared(d, di.Mode()); err != nil {
			return "", err
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, file); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// notShared refuses a file or directory its group or everyone may write:
// any of them could put another program in its place, and migrate gives
// its program decrypted secrets.
func notShared(path string, mode fs.FileMode) error {
	if mode.Perm()&0o022 == 0 {
		return nil
	}
	what := "the program"
	if mode.IsDir() {
		what = "the directory of a provider program"
	}
	return fmt.Errorf("%s %s is writable by its group or by everyone (mode %s): another user could replace what migrate runs with your secrets. "+
		"Make it writable by its owner only (chmod go-w %s)", what, path, mode.Perm(), path)
}

// locate finds p's program: a Command with a slash is that file; else in
// $MIGRATE_PLUGIN_DIR, then beside the running executable (a build
// without sums: in $MIGRATE_PLUGIN_DIR only). Never in PATH: a program
// that happens to be there is not one this migrate was built with.
func locate(p Program) (string, error) {
	if strings.ContainsRune(p.Command, filepath.Separator) {
		return p.Command, nil
	}
	dirs := searchDirs(p.Sum != "")
	if len(dirs) == 0 {
		return "", fmt.Errorf("this migrate was built without the sums of its provider programs (go build or go run, not make build), "+
			"so it runs the %s provider's program %s only from a directory you name, unverified: build migrate with `make build` "+
			"(which records the sums and puts the programs beside it), or set %s to the directory of the programs you built", p.Name, p.Command, PluginDirEnv)
	}
	for _, d := range dirs {
		path := filepath.Join(d, p.Command)
		if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
			return path, nil
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("the %s provider's program %s is in none of %s (migrate does not look in PATH): "+
		"build it with `make build`, which puts it in bin/ beside migrate, or set %s to the directory it is in",
		p.Name, p.Command, strings.Join(dirs, ", "), PluginDirEnv)
}

// searchDirs are the directories a program is looked for in.
func searchDirs(withSums bool) []string {
	var dirs []string
	if d := os.Getenv(PluginDirEnv); d != "" {
		dirs = append(dirs, d)
	}
	if !withSums {
		return dirs
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	return dirs
}
