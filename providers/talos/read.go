package talos

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Read is the talos_read step type.
const Read = "talos_read"

// readAttrs is a talos_read step; pointers say whether a check is set.
type readAttrs struct {
	Path     string  `cty:"path" required:"true" doc:"The file on the node, such as /var/mnt/data/.probe."`
	Expect   *string `cty:"expect" doc:"The exact content expected, compared with surrounding whitespace trimmed."`
	Contains *string `cty:"contains" doc:"A string the content must contain."`
	// ErrorMessage: a failed check says what it means for the migration.
	ErrorMessage string `cty:"error_message" doc:"What a failure means, said to a person (\"no iGPU: ...\"): the failure starts with it, then says what was read."`
}

var readStep = &sdk.StepType[*Provider, readAttrs, none, none]{
	Name:        Read,
	Description: "Reads a file through the Talos API and compares its content.",
	Rollback:    "Nothing to undo.",
	CanCheck:    true,
	WaitsOnly:   true,
	Unknowns:    true, // the plan says what it will read when known
	Plan: func(_ context.Context, c *handle, a readAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
		if d := checkRead(c, a); d.HasErrors() {
			return sdk.Plan[none]{Diagnostics: d}
		}
		if !known(newCall(c), "path", "expect", "contains") {
			return sdk.Plan[none]{Diff: "read a file through the Talos API (its settings are known after earlier steps run)"}
		}
		what := "exists"
		switch {
		case a.Expect != nil:
			what = "holds exactly " + quoted(c, "expect", strings.TrimSpace(*a.Expect))
		case a.Contains != nil:
			what = "contains " + quoted(c, "contains", *a.Contains)
		}
		return sdk.Plan[none]{Diff: fmt.Sprintf("read %s through the Talos API on %s and check that it %s", c.Shown(a.Path, "path"), strings.Join(c.Settings.targets(), ", "), what)}
	},
	Apply: func(ctx context.Context, sc *handle, a readAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
		if d := checkRead(sc, a); d.HasErrors() {
			return sdk.Apply[none, none]{Diagnostics: d}
		}
		c := newCall(sc)
		if d := c.reachable(ctx); d.HasErrors() {
			return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: d}
		}
		path := sc.Shown(a.Path, "path")
		err := c.p.forNodes(ctx, func(n node) error {
			got, err := n.readFile(ctx, a.Path)
			if err != nil {
				c.captureDmesg(ctx, n)
				return err
			}
			text := string(got)
			switch {
			case a.Expect != nil && strings.TrimSpace(text) != strings.TrimSpace(*a.Expect):
				return fmt.Errorf("%s holds %q, not the expected %s", path, clip(strings.TrimSpace(text)), quoted(sc, "expect", strings.TrimSpace(*a.Expect)))
			case a.Contains != nil && !strings.Contains(text, *a.Contains):
				return fmt.Errorf("%s (%d bytes) does not contain %s", path, len(got), quoted(sc, "contains", *a.Contains))
			}
			c.log.Printf("node %s: %s read through the API (%d bytes) as expected", n.name, path, len(got))
			return nil
		})
		if d := c.unreachable(err); d != nil {
			return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: d}
		}
		if err != nil && a.ErrorMessage != "" {
			return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: phases.Errorf("Read Check Failed", "%s: %s\nWhat was read: %v.", c.addr, sc.Shown(a.ErrorMessage, "error_message"), err)}
		}
		if err != nil {
			return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: phases.Errorf("Read Check Failed", "%v.", err)}
		}
		return sdk.Apply[none, none]{Outputs: none{}, Revert: nothingToUndo()}
	},
}

// checkRead checks the path of a talos_read step, when known.
func checkRead(c *handle, a readAttrs) phases.Diagnostics {
	switch {
	case c.Unknown("path"):
		return nil
	case a.Path == "":
		return missing(c, "path")
	case !strings.HasPrefix(a.Path, "/"):
		return phases.Errorf("Invalid Attribute Value", "The \"path\" attribute of %s must be an absolute path on the node, such as /var/mnt/data/.probe.", c.Addr)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// quoted is v, the attribute attr, quoted for a message; redacted before
// it is quoted when it is sensitive.
func quoted(c *handle, attr, v string) string {
	return c.Shown(strconv.Quote(v), attr)
}
