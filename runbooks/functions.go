package runbooks

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	ctyyaml "github.com/zclconf/go-cty-yaml"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"

	"github.com/homelab-migrate/migrate/phases"
)

// maxFileSize bounds what file() and templatefile() read, so that a runbook
// pointing at a huge file fails with a message instead of eating memory.
const maxFileSize = 64 << 20

// functions returns the functions available in every expression of a
// runbook: the cty standard library under the names Terraform uses, plus
// yamlencode/yamldecode and the file system and environment functions,
// which resolve relative paths against the runbook directory.
func (l *Loader) functions() map[string]function.Function {
	fns := map[string]function.Function{}
	for _, family := range []map[string]function.Function{
		numberFunctions, stringFunctions, collectionFunctions, encodingFunctions, typeFunctions, l.fileFunctions(),
	} {
		maps.Copy(fns, family)
	}
	// templatefile sees every function except itself, so a template cannot
	// recurse into templates.
	fns["not_older"] = l.notOlderFunc()
	fns["templatefile"] = l.templateFileFunc(maps.Clone(fns))
	return fns
}

// numberFunctions are the functions on numbers.
var numberFunctions = map[string]function.Function{
	"abs":      stdlib.AbsoluteFunc,
	"ceil":     stdlib.CeilFunc,
	"floor":    stdlib.FloorFunc,
	"log":      stdlib.LogFunc,
	"max":      stdlib.MaxFunc,
	"min":      stdlib.MinFunc,
	"parseint": stdlib.ParseIntFunc,
	"pow":      stdlib.PowFunc,
	"signum":   stdlib.SignumFunc,
}

// stringFunctions are the functions on strings.
var stringFunctions = map[string]function.Function{
	"chomp":        stdlib.ChompFunc,
	"format":       stdlib.FormatFunc,
	"formatlist":   stdlib.FormatListFunc,
	"indent":       stdlib.IndentFunc,
	"join":         stdlib.JoinFunc,
	"lower":        stdlib.LowerFunc,
	"regex":        stdlib.RegexFunc,
	"regexall":     stdlib.RegexAllFunc,
	"regexreplace": stdlib.RegexReplaceFunc,
	"replace":      replaceFunc,
	"split":        stdlib.SplitFunc,
	"strlen":       stdlib.StrlenFunc,
	"strrev":       stdlib.ReverseFunc,
	"substr":       stdlib.SubstrFunc,
	"title":        stdlib.TitleFunc,
	"trim":         stdlib.TrimFunc,
	"trimprefix":   stdlib.TrimPrefixFunc,
	"trimsuffix":   stdlib.TrimSuffixFunc,
	"trimspace":    stdlib.TrimSpaceFunc,
	"upper":        stdlib.UpperFunc,
	"startswith":   stringPredicate("prefix", strings.HasPrefix),
	"endswith":     stringPredicate("suffix", strings.HasSuffix),
	"strcontains":  stringPredicate("substr", strings.Contains),
}

// collectionFunctions are the functions on lists, sets and maps.
var collectionFunctions = map[string]function.Function{
	"chunklist":       stdlib.ChunklistFunc,
	"coalesce":        stdlib.CoalesceFunc,
	"coalescelist":    stdlib.CoalesceListFunc,
	"compact":         stdlib.CompactFunc,
	"concat":          stdlib.ConcatFunc,
	"contains":        stdlib.ContainsFunc,
	"distinct":        stdlib.DistinctFunc,
	"element":         stdlib.ElementFunc,
	"flatten":         stdlib.FlattenFunc,
	"index":           stdlib.IndexFunc,
	"keys":            stdlib.KeysFunc,
	"length":          lengthFunc,
	"lookup":          stdlib.LookupFunc,
	"merge":           stdlib.MergeFunc,
	"range":           stdlib.RangeFunc,
	"reverse":         stdlib.ReverseListFunc,
	"setintersection": stdlib.SetIntersectionFunc,
	"setproduct":      stdlib.SetProductFunc,
	"setsubtract":     stdlib.SetSubtractFunc,
	"setunion":        stdlib.SetUnionFunc,
	"slice":           stdlib.SliceFunc,
	"sort":            stdlib.SortFunc,
	"values":          stdlib.ValuesFunc,
	"zipmap":          stdlib.ZipmapFunc,
}

// encodingFunctions encode, decode and hash.
var encodingFunctions = map[string]function.Function{
	// encoding
	"base64decode": base64DecodeFunc,
	"base64encode": stringFunc("str", func(s string) (string, error) {
		return base64.StdEncoding.EncodeToString([]byte(s)), nil
	}),
	"csvdecode":  stdlib.CSVDecodeFunc,
	"jsondecode": stdlib.JSONDecodeFunc,
	"jsonencode": stdlib.JSONEncodeFunc,
	"urlencode":  stringFunc("str", func(s string) (string, error) { return url.QueryEscape(s), nil }),
	"yamldecode": ctyyaml.YAMLDecodeFunc,
	"yamlencode": ctyyaml.YAMLEncodeFunc,

	// hashes
	"md5":    hashFunc(func(b []byte) []byte { s := md5.Sum(b); return s[:] }),
	"sha1":   hashFunc(func(b []byte) []byte { s := sha1.Sum(b); return s[:] }),
	"sha256": hashFunc(func(b []byte) []byte { s := sha256.Sum256(b); return s[:] }),
	"sha512": hashFunc(func(b []byte) []byte { s := sha512.Sum512(b); return s[:] }),
}

// typeFunctions are the dates, and the functions on types, conversions and
// sensitivity.
var typeFunctions = map[string]function.Function{
	// dates
	"formatdate": stdlib.FormatDateFunc,
	"timeadd":    stdlib.TimeAddFunc,

	// types and conversion
	"can":          tryfunc.CanFunc,
	"try":          tryfunc.TryFunc,
	"tobool":       stdlib.MakeToFunc(cty.Bool),
	"tolist":       stdlib.MakeToFunc(cty.List(cty.DynamicPseudoType)),
	"tomap":        stdlib.MakeToFunc(cty.Map(cty.DynamicPseudoType)),
	"tonumber":     stdlib.MakeToFunc(cty.Number),
	"toset":        stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)),
	"tostring":     stdlib.MakeToFunc(cty.String),
	"sensitive":    sensitiveFunc,
	"nonsensitive": nonsensitiveFunc,
}

// fileFunctions are the paths, files and environment functions: they
// resolve relative paths against the runbook directory.
func (l *Loader) fileFunctions() map[string]function.Function {
	return map[string]function.Function{
		"abspath": stringFunc("path", func(p string) (string, error) { return l.abs(p), nil }),
		"basename": stringFunc("path", func(p string) (string, error) {
			return filepath.Base(p), nil
		}),
		"dirname": stringFunc("path", func(p string) (string, error) {
			return filepath.Dir(p), nil
		}),
		"env": stringFunc("name", func(name string) (string, error) {
			return l.getenv(name), nil
		}),
		"file": stringFunc("path", func(p string) (string, error) {
			b, err := l.readFile(p)
			if err != nil {
				return "", err
			}
			if !utf8.Valid(b) {
				return "", fmt.Errorf("the file %q is not valid UTF-8; use a path attribute instead of reading binary files into the runbook", p)
			}
			return string(b), nil
		}),
		"fileexists": function.New(&function.Spec{
			Params: []function.Parameter{{Name: "path", Type: cty.String}},
			Type:   function.StaticReturnType(cty.Bool),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				_, err := l.statFile(args[0].AsString())
				if errors.Is(err, fs.ErrNotExist) {
					return cty.False, nil
				}
				return cty.BoolVal(err == nil), err
			},
		}),
	}
}

// abs resolves p against the runbook directory.
func (l *Loader) abs(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(l.opts.Dir, p)
}

// getenv looks name up in Options.Environ; the last entry wins, as in a
// shell. A name that is not set yields "".
func (l *Loader) getenv(name string) string {
	v := ""
	for _, kv := range l.opts.Environ {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// fsPath returns the path within the runbook's fs.FS for a relative path
// that stays inside the runbook directory, or "" when p must be read from
// the operating system (absolute, or leaving the directory with "..").
func (l *Loader) fsPath(p string) string {
	if l.fsys == nil || p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "/") {
		return ""
	}
	clean := path.Clean(filepath.ToSlash(p))
	if !fs.ValidPath(clean) {
		return ""
	}
	return clean
}

func (l *Loader) statFile(p string) (fs.FileInfo, error) {
	if p == "" {
		return nil, errors.New("the path is empty")
	}
	if fp := l.fsPath(p); fp != "" {
		return fs.Stat(l.fsys, fp)
	}
	return os.Stat(l.abs(p))
}

// readFile reads a regular file named relative to the runbook directory,
// through the runbook's fs.FS when it lies inside it.
func (l *Loader) readFile(p string) ([]byte, error) {
	fi, err := l.statFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no file exists at %q (paths are relative to the runbook directory)", p)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %q: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%q is not a regular file", p)
	}
	if fi.Size() > maxFileSize {
		return nil, fmt.Errorf("%q is larger than %d MiB", p, maxFileSize>>20)
	}
	var r io.ReadCloser
	if fp := l.fsPath(p); fp != "" {
		r, err = l.fsys.Open(fp)
	} else {
		r, err = os.Open(l.abs(p))
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %q: %w", p, err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read %q: %w", p, err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%q is larger than %d MiB", p, maxFileSize>>20)
	}
	return b, nil
}

// templateFileFunc renders a file as an HCL template with the given
// variables, like Terraform's templatefile.
func (l *Loader) templateFileFunc(fns map[string]function.Function) function.Function {
	render := func(args []cty.Value) (cty.Value, error) {
		p := args[0].AsString()
		src, err := l.readFile(p)
		if err != nil {
			return cty.NilVal, err
		}
		tmpl, diags := hclsyntax.ParseTemplate(src, p, hcl.InitialPos)
		if diags.HasErrors() {
			return cty.NilVal, fmt.Errorf("the template %q is invalid: %s", p, diags.Error())
		}
		varsVal := args[1]
		if varsVal.IsNull() {
			return cty.NilVal, function.NewArgErrorf(1, "the variables must not be null")
		}
		ty := varsVal.Type()
		if !ty.IsObjectType() && !ty.IsMapType() {
			return cty.NilVal, function.NewArgErrorf(1, "the variables must be an object or a map, as in { name = \"x\" }")
		}
		vars := map[string]cty.Value{}
		for it := varsVal.ElementIterator(); it.Next(); {
			k, v := it.Element()
			name := k.AsString()
			if !hclsyntax.ValidIdentifier(name) {
				return cty.NilVal, function.NewArgErrorf(1, "%q cannot be a template variable name: names must be identifiers", name)
			}
			vars[name] = v
		}
		for _, tr := range tmpl.Variables() {
			if _, ok := vars[tr.RootName()]; !ok {
				r := tr.SourceRange()
				return cty.NilVal, function.NewArgErrorf(1, "the variables do not contain %q, referenced at %s", tr.RootName(), r.String())
			}
		}
		val, diags := tmpl.Value(&hcl.EvalContext{Variables: vars, Functions: fns})
		if diags.HasErrors() {
			return cty.NilVal, fmt.Errorf("rendering %q: %s", p, diags.Error())
		}
		return val, nil
	}
	return function.New(&function.Spec{
		Params: []function.Parameter{
			{Name: "path", Type: cty.String},
			{Name: "vars", Type: cty.DynamicPseudoType},
		},
		Type: func(args []cty.Value) (cty.Type, error) {
			if !args[0].IsKnown() || !args[1].IsWhollyKnown() {
				return cty.DynamicPseudoType, nil
			}
			v, err := render(args)
			if err != nil {
				return cty.NilType, err
			}
			return v.Type(), nil
		},
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) { return render(args) },
	})
}

// stringFunc makes a function of one string returning a string.
func stringFunc(param string, f func(string) (string, error)) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: param, Type: cty.String}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			s, err := f(args[0].AsString())
			if err != nil {
				return cty.NilVal, err
			}
			return cty.StringVal(s), nil
		},
	})
}

func stringPredicate(second string, f func(s, x string) bool) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "str", Type: cty.String}, {Name: second, Type: cty.String}},
		Type:   function.StaticReturnType(cty.Bool),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return cty.BoolVal(f(args[0].AsString(), args[1].AsString())), nil
		},
	})
}

func hashFunc(sum func([]byte) []byte) function.Function {
	return stringFunc("str", func(s string) (string, error) { return hex.EncodeToString(sum([]byte(s))), nil })
}

var base64DecodeFunc = stringFunc("str", func(s string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("the string is not valid base64: %w", err)
	}
	if !utf8.Valid(b) {
		return "", errors.New("the decoded bytes are not valid UTF-8")
	}
	return string(b), nil
})

// replaceFunc is Terraform's replace: a substring wrapped in slashes is a
// regular expression.
var replaceFunc = function.New(&function.Spec{
	Params: []function.Parameter{
		{Name: "str", Type: cty.String},
		{Name: "substr", Type: cty.String},
		{Name: "replace", Type: cty.String},
	},
	Type: function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		sub := args[1].AsString()
		if len(sub) > 1 && sub[0] == '/' && sub[len(sub)-1] == '/' {
			return stdlib.RegexReplace(args[0], cty.StringVal(sub[1:len(sub)-1]), args[2])
		}
		return stdlib.Replace(args[0], args[1], args[2])
	},
})

// lengthFunc counts the characters of a string or the elements of a
// collection, as Terraform's length does.
var lengthFunc = function.New(&function.Spec{
	Params: []function.Parameter{{
		Name:             "value",
		Type:             cty.DynamicPseudoType,
		AllowDynamicType: true,
		AllowUnknown:     true,
	}},
	Type: func(args []cty.Value) (cty.Type, error) {
		ty := args[0].Type()
		switch {
		case ty == cty.String, ty == cty.DynamicPseudoType,
			ty.IsCollectionType(), ty.IsTupleType(), ty.IsObjectType():
			return cty.Number, nil
		}
		return cty.NilType, function.NewArgErrorf(0, "length applies to strings, lists, maps, sets, tuples and objects, not %s", ty.FriendlyName())
	},
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		v := args[0]
		if v.Type() == cty.String {
			if !v.IsKnown() {
				return cty.UnknownVal(cty.Number), nil
			}
			return stdlib.Strlen(v)
		}
		if v.Type().IsObjectType() {
			return cty.NumberIntVal(int64(len(v.Type().AttributeTypes()))), nil
		}
		if v.Type() == cty.DynamicPseudoType || !v.IsKnown() {
			return cty.UnknownVal(cty.Number), nil
		}
		return v.Length(), nil
	},
})

var sensitiveFunc = function.New(&function.Spec{
	Params: []function.Parameter{{
		Name: "value", Type: cty.DynamicPseudoType,
		AllowDynamicType: true, AllowUnknown: true, AllowNull: true, AllowMarked: true,
	}},
	Type: func(args []cty.Value) (cty.Type, error) { return args[0].Type(), nil },
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		return args[0].Mark(phases.SensitiveMark), nil
	},
})

var nonsensitiveFunc = function.New(&function.Spec{
	Params: []function.Parameter{{
		Name: "value", Type: cty.DynamicPseudoType,
		AllowDynamicType: true, AllowUnknown: true, AllowNull: true, AllowMarked: true,
	}},
	Type: func(args []cty.Value) (cty.Type, error) { return args[0].Type(), nil },
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		v, marks := args[0].Unmark()
		delete(marks, phases.SensitiveMark)
		return v.WithMarks(marks), nil
	},
})
