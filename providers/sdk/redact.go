package sdk

import (
	"fmt"
	"strconv"

	"github.com/homelab-migrate/migrate/phases"
)

// Redaction by mark: a handler formats what it shows of its attributes
// (a diff, a log line, an error, revert data) from what these return, so
// that a sensitive value is replaced before it is quoted, joined or
// encoded. The scrubber only learns a secret's plain forms: once quoted
// for a shell or escaped for JSON it no longer matches them.

// Shown is v, the attribute attr (or its element at keys), as it may be
// shown: phases.Redacted when it is sensitive.
func (c *Call[S]) Shown(v string, attr string, keys ...any) string {
	if c.Sensitive(attr, keys...) {
		return phases.Redacted
	}
	return v
}

// ShownArgv is argv, the list attribute attr, with its sensitive elements
// replaced by phases.Redacted; quote then formats each other element.
func (c *Call[S]) ShownArgv(attr string, argv []string, quote func(string) string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if c.Sensitive(attr, i) {
			out[i] = phases.Redacted
			continue
		}
		out[i] = quote(a)
	}
	return out
}

// ArgvWarning warns when an element of the argv attribute attr (of n
// elements) is sensitive: the arguments of a running command are
// readable by every user of the machine it runs on (ps,
// /proc/PID/cmdline), whatever migrate redacts; its environment is not.
func (c *Call[S]) ArgvWarning(attr string, n int) phases.Diagnostics {
	var secret []string
	for i := range n {
		if c.Sensitive(attr, i) {
			secret = append(secret, strconv.Itoa(i))
		}
	}
	if len(secret) == 0 {
		return nil
	}
	which := "Element " + secret[0] + " of the %q attribute of %s is"
	if len(secret) > 1 {
		which = "Elements " + andList(secret) + " of the %q attribute of %s are"
	}
	return phases.Diagnostics{{
		Severity: phases.Warning,
		Summary:  "Sensitive Value In Command Arguments",
		Detail: fmt.Sprintf("A sensitive value in command's arguments is visible to every user of the machine in ps; pass it through env. "+
			which+" sensitive: migrate shows "+phases.Redacted+" in its place, but while the command runs anyone who can list "+
			"processes reads it. Put it in the step's env (env = { TOKEN = var.token }) and let the command read $TOKEN.",
			attr, c.Addr),
	}}
}
