package runbooks_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

const servicesRunbook = `
phase "data-apps" {
  step "exec" "stop_old" { command = ["true"] }
  step "exec" "stop_db" { command = ["true"] }
  step "exec" "release" { command = ["true"] }
  check "http_check" "gate" {
    url  = "http://gate"
    when = "before"
  }
  check "http_check" "answers" { url = "http://answers" }
}
phase "ingress" {
  after = [phase.data-apps]
  step "exec" "stop_matrix" { command = ["true"] }
  check "http_check" "federation" { url = "http://federation" }
}
`

// A service block names its window's ends: the steps that stop the old
// instance (one or a list) and the after-check that says the new one
// serves, in that phase or a later one; max_downtime is optional.
func TestServices(t *testing.T) {
	rb := mustLoad(t, map[string]string{"main.hcl": servicesRunbook + `
service "jellyfin" {
  stop         = [exec.stop_old, exec.stop_db]
  serving      = http_check.answers
  max_downtime = "30m"
}
service "matrix" {
  stop    = exec.stop_matrix
  serving = http_check.federation
}
service "late" {
  stop    = exec.release
  serving = http_check.federation
}
`}, runbooks.Options{})
	if len(rb.Services) != 3 {
		t.Fatalf("services = %d, want 3", len(rb.Services))
	}
	j, m := rb.Services[0], rb.Services[1]
	if j.Name != "jellyfin" || len(j.Stop) != 2 || j.Stop[1] != (phases.Address{Type: "exec", Name: "stop_db"}) || j.Serving.String() != "http_check.answers" || j.MaxDowntime != 30*time.Minute {
		t.Errorf("jellyfin = %+v", j)
	}
	if j.Range.Filename != "main.hcl" || j.Range.StartLine != 18 {
		t.Errorf("jellyfin's range = %v, want main.hcl:18", j.Range)
	}
	if m.Name != "matrix" || len(m.Stop) != 1 || m.Stop[0].String() != "exec.stop_matrix" || m.MaxDowntime != 0 {
		t.Errorf("matrix = %+v", m)
	}
}

// A service block that names the wrong things is an error at the
// reference, saying what to name instead.
func TestServiceMistakes(t *testing.T) {
	base := strings.Count(servicesRunbook, "\n") // the service's first line is base+1
	for _, tc := range []struct {
		service, summary, detail string
		line                     int // of the subject, in service
	}{
		{`service "s" {
  stop    = http_check.answers
  serving = http_check.answers
}`, "Service Stop Is a Check", "name the steps that stop the old instance", 2},
		{`service "s" {
  stop    = exec.stop_old
  serving = exec.release
}`, "Service Serving Is Not an After-Check", "exec.release", 3},
		{`service "s" {
  stop    = exec.stop_old
  serving = http_check.gate
}`, "Service Serving Is Not an After-Check", "not before", 3},
		{`service "s" {
  stop    = exec.stop_matrix
  serving = http_check.answers
}`, "Service Served Before It Stops", `phase "ingress"`, 3},
		{`service "s" {
  stop    = exec.stop_olds
  serving = http_check.answers
}`, "Service Names an Undeclared Step", `Did you mean "exec.stop_old"?`, 2},
		{`service "s" {
  stop    = [exec.stop_old, exec.stop_old]
  serving = http_check.answers
}`, "Duplicate Service Stop", "twice", 2},
		{`service "s" {
  stop    = []
  serving = http_check.answers
}`, "Service Without a Stop", "names no stop step", 2},
		{`service "s" {
  stop    = "exec.stop_old"
  serving = http_check.answers
}`, "Invalid Service Reference", "without quotes", 2},
		{`service "s" {
  stop         = exec.stop_old
  serving      = http_check.answers
  max_downtime = "soon"
}`, "Invalid Duration", "max_downtime", 4},
		{`service "s" {
  stop    = exec.stop_old
  serving = http_check.answers
}
service "t" {
  stop    = exec.stop_old
  serving = http_check.answers
}`, "Step Stops Two Services", `service "s" already`, 6},
		{`service "s" {
  stop    = exec.stop_old
  serving = http_check.answers
}
service "s" {
  stop    = exec.stop_db
  serving = http_check.answers
}`, "Duplicate Service", "declared already, at main.hcl:", 5},
	} {
		_, diags := load(t, map[string]string{"main.hcl": servicesRunbook + tc.service + "\n"}, runbooks.Options{})
		found := false
		for _, d := range diags {
			at := ""
			if d.Subject != nil {
				at = d.Subject.Filename + ":" + itoa(d.Subject.StartLine)
			}
			found = found || d.Summary == tc.summary && strings.Contains(d.Detail, tc.detail) && at == "main.hcl:"+itoa(base+tc.line)
		}
		if !found {
			t.Errorf("%s\n: no %q saying %q at line %d of it among %v", tc.service, tc.summary, tc.detail, tc.line, diags.Err())
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
