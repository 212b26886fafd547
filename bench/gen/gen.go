// Package gen writes the generated runbooks the engine benchmark runs:
// a DAG of exec steps in levels, a flat phase of no-op wait steps, and the
// exec DAG again as a Terraform configuration (terraform_data resources
// with a local-exec provisioner) for the comparison with terraform apply.
package gen

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Levels names n steps in levels of w: level i holds steps i*w .. i*w+w-1,
// and each step depends on every step of the level before.
func Levels(n, w int) [][]string {
	if w < 1 {
		w = 1
	}
	var out [][]string
	for i := 0; i < n; i += w {
		var lvl []string
		for j := i; j < min(i+w, n); j++ {
			lvl = append(lvl, Name(j))
		}
		out = append(out, lvl)
	}
	return out
}

// Name is the name of step i.
func Name(i int) string { return fmt.Sprintf("s%05d", i) }

// Script is the shell script each exec step runs: a 50 ms sleep, then its
// name appended to log.
func Script(name, log string) string {
	return "sleep 0.05; echo " + name + " >> " + shellQuote(log)
}

// Argv is the argv of a step's command.
func Argv(name, log string) []string { return []string{"sh", "-c", Script(name, log)} }

// ExecLevels writes dir/main.hcl: one phase "bench" with n exec steps in
// levels of w, each running Script(name, log). log should be absolute.
func ExecLevels(dir string, n, w int, log string) error {
	return write(dir, "main.hcl", func(b *bufio.Writer) {
		b.WriteString("phase \"bench\" {\n")
		var prev []string
		for _, lvl := range Levels(n, w) {
			for _, name := range lvl {
				fmt.Fprintf(b, "  step \"exec\" %q {\n    command = %s\n", name, hclList(Argv(name, log)))
				if len(prev) > 0 {
					fmt.Fprintf(b, "    depends_on = %s\n", refs("exec.", prev))
				}
				b.WriteString("  }\n")
			}
			prev = lvl
		}
		b.WriteString("}\n")
	})
}

// Waits writes dir/main.hcl: one phase "bench" with n independent wait
// steps of duration "0s".
func Waits(dir string, n int) error {
	return write(dir, "main.hcl", func(b *bufio.Writer) {
		b.WriteString("phase \"bench\" {\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(b, "  step \"wait\" %q { duration = \"0s\" }\n", Name(i))
		}
		b.WriteString("}\n")
	})
}

// Terraform writes dir/main.tf: the DAG of ExecLevels as terraform_data
// resources, each with a local-exec provisioner running the same script
// and depends_on the level before. terraform_data is built into
// Terraform, so init downloads nothing.
func Terraform(dir string, n, w int, log string) error {
	return write(dir, "main.tf", func(b *bufio.Writer) {
		var prev []string
		for _, lvl := range Levels(n, w) {
			for _, name := range lvl {
				fmt.Fprintf(b, "resource \"terraform_data\" %q {\n", name)
				fmt.Fprintf(b, "  provisioner \"local-exec\" {\n    command     = %s\n    interpreter = [\"sh\", \"-c\"]\n  }\n", hclString(Script(name, log)))
				if len(prev) > 0 {
					fmt.Fprintf(b, "  depends_on = %s\n", refs("terraform_data.", prev))
				}
				b.WriteString("}\n")
			}
			prev = lvl
		}
	})
}

func write(dir, file string, body func(*bufio.Writer)) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, file))
	if err != nil {
		return err
	}
	b := bufio.NewWriter(f)
	body(b)
	if err := b.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func refs(prefix string, names []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = prefix + n
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func hclList(items []string) string {
	parts := make([]string, len(items))
	for i, s := range items {
		parts[i] = hclString(s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// hclString quotes s for HCL: Go quoting, with template sequences escaped.
func hclString(s string) string {
	q := strconv.Quote(s)
	q = strings.ReplaceAll(q, "${", "$${")
	return strings.ReplaceAll(q, "%{", "%%{")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// The same groups*per independent exec steps, each running "true" with
// its group and key as arguments, written two ways for the for_each
// comparison: ExecFlat one block per step, ExecForEach one block per
// group with for_each over a map of per keys. Both load to the same
// groups*per steps with the same commands.

// GroupName is the name of group g; Key the key of step k of a group.
func GroupName(g int) string { return fmt.Sprintf("g%03d", g) }

// Key is the for_each key of step k of a group.
func Key(k int) string { return fmt.Sprintf("k%03d", k) }

// ExecFlat writes dir/main.hcl: one phase "bench" with groups*per exec
// steps written out, step "exec" "gGGG_kKKK" { command = ["true", "gGGG", "kKKK"] }.
func ExecFlat(dir string, groups, per int) error {
	return write(dir, "main.hcl", func(b *bufio.Writer) {
		b.WriteString("phase \"bench\" {\n")
		for g := 0; g < groups; g++ {
			for k := 0; k < per; k++ {
				fmt.Fprintf(b, "  step \"exec\" \"%s_%s\" {\n    command = [\"true\", %q, %q]\n  }\n", GroupName(g), Key(k), GroupName(g), Key(k))
			}
		}
		b.WriteString("}\n")
	})
}

// ExecForEach writes dir/main.hcl: a local map of per keys (each key's
// value is itself) and one phase "bench" with groups exec steps, each
// with for_each over that map: step "exec" "gGGG" { for_each = local.keys;
// command = ["true", "gGGG", each.key] }, the instances
// exec.gGGG["kKKK"].
func ExecForEach(dir string, groups, per int) error {
	return write(dir, "main.hcl", func(b *bufio.Writer) {
		b.WriteString("locals {\n  keys = {\n")
		for k := 0; k < per; k++ {
			fmt.Fprintf(b, "    %s = %q\n", Key(k), Key(k))
		}
		b.WriteString("  }\n}\n\nphase \"bench\" {\n")
		for g := 0; g < groups; g++ {
			fmt.Fprintf(b, "  step \"exec\" %q {\n    for_each = local.keys\n    command  = [\"true\", %q, each.key]\n  }\n", GroupName(g), GroupName(g))
		}
		b.WriteString("}\n")
	})
}
