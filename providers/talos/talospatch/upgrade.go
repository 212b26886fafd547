package talospatch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"gopkg.in/yaml.v3"
)

// Result is one patch file rewritten for a release.
type Result struct {
	To       string // the release, as given
	Old, New []byte // New is Old when nothing moved
	Moved    []Moved
	Left     []Left
}

// Moved is a key of the v1alpha1 document now written in a typed
// document.
type Moved struct {
	Field string // machine.kubelet.extraArgs
	Line  int    // in Old
	Into  string // the document's kind
}

// Left is a key the release rejects that stays as written: no rule
// rewrites it, or its value could not be read.
type Left struct {
	Field string
	Line  int
	What  string // what to do
}

// Changed says whether the patch was rewritten.
func (r *Result) Changed() bool { return len(r.Moved) > 0 }

// Diff is the rewrite as a unified diff of the file name.
func (r *Result) Diff(name string) string {
	d, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(r.Old), B: lines(r.New),
		FromFile: name, ToFile: name + " (Talos " + r.To + ")", Context: 2,
	})
	return d
}

// lines splits text for difflib, whose SplitLines adds a line to text
// ending in a newline.
func lines(b []byte) []string {
	ls := strings.SplitAfter(string(b), "\n")
	if ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	} else {
		ls[len(ls)-1] += "\n\\ No newline at end of file\n"
	}
	return ls
}

// Upgrade rewrites a patch (YAML documents, as talosctl --config-patch
// takes them) for the Talos release to. A JSON patch (a YAML list of
// operations) and typed documents are kept as they are.
func Upgrade(data []byte, to string) (*Result, error) {
	contract, err := coreconfig.ParseContractFromVersion(to)
	if err != nil {
		return nil, fmt.Errorf("%q is not a Talos version (such as \"v1.14.7\")", to)
	}
	docsIn, err := decodeAll(data)
	if err != nil {
		return nil, err
	}
	r := &Result{To: to, Old: data, New: data}
	out := &docs{}
	var kept []*yaml.Node
	for _, d := range docsIn {
		root := rootOf(d)
		if root == nil || root.Kind != yaml.MappingNode || hasKey(root, "kind") {
			kept = append(kept, d)
			continue
		}
		budget := aliasBudget
		if err := expandAliases(root, &budget); err != nil {
			return nil, err
		}
		r.rewrite(root, contract, out)
		if len(root.Content) == 0 {
			out.comment(d.HeadComment, root.HeadComment, d.FootComment)
			continue
		}
		kept = append(kept, d)
	}
	if !r.Changed() {
		return r, nil
	}
	newDocs, err := out.nodes()
	if err != nil {
		return nil, err
	}
	r.New, err = encodeAll(append(kept, newDocs...))
	return r, err
}

// rewrite moves the keys of one v1alpha1 document that the release's
// contract puts in typed documents.
func (r *Result) rewrite(root *yaml.Node, contract *coreconfig.VersionContract, out *docs) {
	for _, rl := range rules {
		if rl.since.Greater(contract) {
			continue
		}
		key, val := lookup(root, rl.path)
		if key == nil {
			continue
		}
		field := strings.Join(rl.path, ".")
		before := *out
		into, left, err := rl.move(val, out)
		if err != nil {
			*out = before
			r.Left = append(r.Left, Left{Field: field, Line: key.Line, What: fmt.Sprintf("its value cannot be read (%v): fix it, or move it by hand", err)})
			continue
		}
		movedNothing := len(left) > 0 && len(left) == len(keysOf(val))
		if movedNothing {
			*out = before
		}
		for sub, what := range left {
			line := key.Line
			if k, _ := lookup(val, []string{sub}); k != nil {
				line = k.Line
			}
			r.Left = append(r.Left, Left{Field: field + "." + sub, Line: line, What: what})
		}
		if !movedNothing {
			r.Moved = append(r.Moved, Moved{Field: field, Line: key.Line, Into: into})
			out.comment(cut(root, rl.path, left)...)
		}
	}
	for _, u := range uncovered {
		if u.since.Greater(contract) {
			continue
		}
		if key, _ := lookup(root, u.path); key != nil {
			r.Left = append(r.Left, Left{Field: strings.Join(u.path, "."), Line: key.Line, What: u.what})
		}
	}
	sortLeft(r.Left)
}

// expandAliases replaces each alias by a copy of what it names and drops
// the anchors: a key moved out of the document may hold an anchor that
// another key, staying, refers to. budget is how many nodes the copies
// may add: aliases of aliases ("billion laughs") are refused, not
// expanded.
func expandAliases(n *yaml.Node, budget *int) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		c, err := deepCopy(n.Alias, budget)
		if err != nil {
			return err
		}
		*n = *c
	}
	n.Anchor = ""
	for _, c := range n.Content {
		if err := expandAliases(c, budget); err != nil {
			return err
		}
	}
	return nil
}

// aliasBudget is the nodes alias expansion may add to one patch.
const aliasBudget = 10_000

func deepCopy(n *yaml.Node, budget *int) (*yaml.Node, error) {
	if *budget--; *budget < 0 {
		return nil, errors.New("its aliases expand to more than 10000 nodes")
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return deepCopy(n.Alias, budget)
	}
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, x := range n.Content {
		var err error
		if c.Content[i], err = deepCopy(x, budget); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

func decodeAll(data []byte) ([]*yaml.Node, error) {
	var out []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("not YAML: %w", err)
		}
		out = append(out, &n)
	}
}

func encodeAll(ns []*yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	for _, n := range ns {
		if err := enc.Encode(n); err != nil {
			return nil, fmt.Errorf("encoding the rewritten patch: %w", err)
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func rootOf(d *yaml.Node) *yaml.Node {
	if d.Kind == yaml.DocumentNode {
		if len(d.Content) == 0 {
			return nil
		}
		return d.Content[0]
	}
	return d
}

func hasKey(m *yaml.Node, key string) bool {
	k, _ := lookup(m, []string{key})
	return k != nil
}

// lookup finds a key path in nested mappings.
func lookup(n *yaml.Node, path []string) (key, val *yaml.Node) {
	for _, p := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil, nil
		}
		key, val = nil, nil
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == p {
				key, val = n.Content[i], n.Content[i+1]
				break
			}
		}
		if key == nil {
			return nil, nil
		}
		n = val
	}
	return key, val
}

// cut removes what moved of the key at path (all of it, or its sub-keys
// but those left), then the mappings it leaves empty; it returns the
// comments of what it removed, to keep them.
func cut(root *yaml.Node, path []string, left map[string]string) []string {
	_, val := lookup(root, path)
	if len(left) > 0 && val.Kind == yaml.MappingNode {
		var comments []string
		var keep []*yaml.Node
		for i := 0; i+1 < len(val.Content); i += 2 {
			if _, ok := left[val.Content[i].Value]; ok {
				keep = append(keep, val.Content[i], val.Content[i+1])
				continue
			}
			comments = append(comments, val.Content[i].HeadComment)
		}
		val.Content = keep
		return comments
	}
	var comments []string
	for depth := len(path); depth > 0; depth-- {
		parent := root
		if depth > 1 {
			_, parent = lookup(root, path[:depth-1])
		}
		removed := removeKey(parent, path[depth-1])
		comments = append(comments, removed...)
		if len(parent.Content) > 0 {
			break
		}
	}
	return comments
}

func removeKey(m *yaml.Node, key string) []string {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			k, v := m.Content[i], m.Content[i+1]
			m.Content = append(m.Content[:i:i], m.Content[i+2:]...)
			return []string{k.HeadComment, k.LineComment, v.LineComment, k.FootComment}
		}
	}
	return nil
}

func sortLeft(ls []Left) {
	slices.SortFunc(ls, func(a, b Left) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return strings.Compare(a.Field, b.Field)
	})
}
