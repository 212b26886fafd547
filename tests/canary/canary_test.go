package canary_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/providers/providertest"
)

var migrate string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "migrate-canary")
	if err != nil {
		panic(err)
	}
	migrate = filepath.Join(dir, "migrate")
	if out, err := exec.Command("go", "build", "-o", migrate, "../../cmd/migrate").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runbook uses var.pw in every attribute of every local step type that
// can take it: argv, env, creates, an approval's messages, a URL, and the
// argv of a step that fails (its error shows the command). var.printed
// is what the commands print of it.
const runbook = `
variable "pw" {
  sensitive = true
}
variable "printed" {
  sensitive = true
}
variable "url" {}

phase "one" {
  step "exec" "argv" {
    command = ["sh", "-c", "printf '%s\\n' \"$1\"; printf 'err %s\\n' \"$1\" >&2", "argv", var.printed]
    revert  = ["printf", "undo %s\\n", var.printed]
  }
  step "exec" "env" {
    command = ["sh", "-c", "printf 'env %s\\n' \"$PW\"; touch \"$MADE\""]
    env     = { PW = var.printed, MADE = "made-${var.pw}" }
    creates = "made-${var.pw}"
    revert  = ["sh", "-c", "echo \"undo $PW\"", "env", var.pw]
  }
  step "approval" "ok" {
    message        = "approve ${var.pw}"
    revert_message = "undo ${var.pw}"
  }
  step "http_check" "up" {
    url     = "${var.url}/?t=${urlencode(var.pw)}"
    timeout = "10s"
  }
  step "wait" "pause" {
    duration = "1ms"
  }
}

phase "two" {
  step "exec" "fails" {
    command = ["sh", "-c", "echo failing; exit 3", "fails", var.pw]
  }
}
`

// TestCanaryInNoArtefact: each canary, given as a sensitive variable,
// is found in no file migrate writes and in nothing it prints, in clear
// or encoded, through plan, a saved plan's run, a run, status, state
// show and rollback.
func TestCanaryInNoArtefact(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	canaries := append([]struct{ Name, Value string }{{"plain", "canary-e2e-4b7d"}}, providertest.Canaries...)
	for _, c := range canaries {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			leaks(t, c.Value, srv.URL)
		})
	}
}

func leaks(t *testing.T, secret, url string) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(runbook), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "MIGRATE_VAR_pw="+secret, "MIGRATE_VAR_printed="+secret, "MIGRATE_VAR_url="+url)
	var shown []string // what each command printed, to be searched
	run := func(wantOK bool, args ...string) string {
		t.Helper()
		cmd := exec.Command(migrate, args...)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if (err == nil) != wantOK {
			t.Fatalf("migrate %s: %v (want success: %v)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, wantOK, &stdout, &stderr)
		}
		shown = append(shown, fmt.Sprintf("the stdout of migrate %s", strings.Join(args, " ")), stdout.String(),
			fmt.Sprintf("the stderr of migrate %s", strings.Join(args, " ")), stderr.String())
		return stdout.String() + stderr.String()
	}
	out := run(true, "plan", "--out", "plan.json")
	if !strings.Contains(out, "Sensitive Value In Command Arguments") {
		t.Errorf("the plan did not warn of the sensitive argument:\n%s", out)
	}
	run(true, "plan", "--json")
	// Phase two fails: its error shows the command.
	out = run(false, "run", "--plan", "plan.json", "--auto-approve", "--approve", "approval.ok", "--json")
	if !strings.Contains(out, `"step_done"`) || !strings.Contains(out, "Command Failed") {
		t.Errorf("the run did not do phase one and fail phase two:\n%s", out)
	}
	run(false, "run", "--all", "--auto-approve", "--approve", "approval.ok")
	run(true, "status")
	run(true, "state", "show", "--json")
	out = run(true, "rollback", "--auto-approve")
	if !strings.Contains(out, "undo") {
		t.Errorf("the rollback ran no revert:\n%s", out)
	}
	var files int
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		// main.hcl is the test's; made-SECRET its command's.
		if err != nil || d.IsDir() || d.Name() == "main.hcl" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(dir, path)
		if _, ok := providertest.Shows(rel, secret); ok && !strings.HasPrefix(rel, "made-") {
			t.Errorf("the file %q is named after the secret", rel)
		}
		if form, ok := providertest.Shows(string(b), secret); ok {
			t.Errorf("%s holds the secret %q as %q", rel, secret, form)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 4 {
		t.Errorf("only %d files were written: want at least the plan, the state, the journal and a log", files)
	}
	if os.Getenv("CANARY_SHOW") != "" {
		t.Log(strings.Join(shown, "\n"))
	}
	for i := 0; i < len(shown); i += 2 {
		if form, ok := providertest.Shows(shown[i+1], secret); ok {
			t.Errorf("%s shows the secret %q as %q", shown[i], secret, form)
		}
	}
}
