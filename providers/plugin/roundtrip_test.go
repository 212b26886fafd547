package plugin_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/providers/plugin"
)

// The round trip: the host fills every field of every request with a
// value of its own (fill, the same in both processes: one binary), the
// program compares what it received with the same fill and answers a
// filled response, which the host compares in turn. A field the codec
// drops, or a kind it cannot carry, fails TestEveryFieldCrosses with
// the field's name.

var (
	ctyType    = reflect.TypeFor[cty.Value]()
	writerType = reflect.TypeFor[io.Writer]()
)

// fill returns a T whose every field, at any depth, is set to a non-zero
// value derived from its path; what it cannot set is in the errors.
func fill[T any]() (T, []string) {
	var v T
	var errs []string
	fillValue(reflect.ValueOf(&v).Elem(), reflect.TypeFor[T]().String(), 0, &errs)
	return v, errs
}

func fillValue(v reflect.Value, path string, depth int, errs *[]string) {
	t := v.Type()
	switch {
	case t == ctyType:
		v.Set(reflect.ValueOf(richValue(path)))
		return
	case t == writerType:
		v.Set(reflect.ValueOf(io.Writer(&bytes.Buffer{})))
		return
	}
	if depth > 6 {
		return // a recursive type: deep enough
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString(path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(len(path)%100 + 1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(len(path)%100 + 1))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(len(path)) + 0.5)
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		fillValue(p.Elem(), path, depth+1, errs)
		v.Set(p)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			v.SetBytes(fmt.Appendf(nil, "%q", path)) // JSON, for a json.RawMessage
			return
		}
		s := reflect.MakeSlice(t, 2, 2)
		for i := range 2 {
			fillValue(s.Index(i), fmt.Sprintf("%s[%d]", path, i), depth+1, errs)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(t)
		k := reflect.New(t.Key()).Elem()
		fillValue(k, path+".key", depth+1, errs)
		e := reflect.New(t.Elem()).Elem()
		fillValue(e, path+"[key]", depth+1, errs)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				*errs = append(*errs, fmt.Sprintf("%s.%s: unexported, cannot be filled", path, f.Name))
				continue
			}
			fillValue(v.Field(i), path+"."+f.Name, depth+1, errs)
		}
	case reflect.Func:
		v.Set(reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, t.NumOut())
			for i := range out {
				out[i] = reflect.Zero(t.Out(i))
			}
			return out
		}))
	case reflect.Chan:
		// A receive-only channel (an Apply's Stop) is made both ways.
		v.Set(reflect.MakeChan(reflect.ChanOf(reflect.BothDir, t.Elem()), 0).Convert(t))
	default:
		*errs = append(*errs, fmt.Sprintf("%s: a %s, cannot be filled", path, t))
	}
}

// richValue has what a cty value can hold that matters to migrate: a
// sensitive leaf, an unknown, a sensitive element, a whole marked map.
func richValue(path string) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{
		"path":   cty.StringVal(path),
		"secret": cty.StringVal("s3cret-" + path).Mark(phases.SensitiveMark),
		"later":  cty.UnknownVal(cty.String),
		"list":   cty.ListVal([]cty.Value{cty.StringVal("a"), cty.StringVal("b").Mark(phases.SensitiveMark)}),
		"map":    cty.MapVal(map[string]cty.Value{"k": cty.NumberIntVal(42)}).Mark(phases.SensitiveMark),
		"null":   cty.NullVal(cty.Bool),
	})
}

// differ names the first field where got is not want: cty values by
// RawEquals (marks and unknowns included), writers skipped (the log is
// checked on its own), funcs expected nil (plugin.NotCarried) but an
// Apply's Intent, which must be there when it was sent.
func differ(want, got reflect.Value, path string) string {
	t := want.Type()
	switch {
	case t == ctyType:
		w, g := want.Interface().(cty.Value), got.Interface().(cty.Value)
		if w == cty.NilVal || g == cty.NilVal {
			if w != g {
				return fmt.Sprintf("%s: sent %#v, got %#v", path, w, g)
			}
			return ""
		}
		if !g.RawEquals(w) {
			return fmt.Sprintf("%s: sent %#v, got %#v", path, w, g)
		}
		return ""
	case t == writerType:
		return ""
	}
	switch t.Kind() {
	case reflect.Func:
		if t == reflect.TypeFor[func(providers.RevertData) error]() {
			// An Apply's Intent: the program has one that calls the
			// host's (TestIntentCrosses checks the calls).
			if want.IsNil() != got.IsNil() {
				return fmt.Sprintf("%s: sent nil=%v, got nil=%v", path, want.IsNil(), got.IsNil())
			}
			return ""
		}
		if !got.IsNil() {
			return path + ": a func crossed the pipe"
		}
		return ""
	case reflect.Chan:
		// The program has a channel of its own: only that there is one
		// crosses (TestStopCrosses checks its closing).
		if want.IsNil() != got.IsNil() {
			return fmt.Sprintf("%s: sent nil=%v, got nil=%v", path, want.IsNil(), got.IsNil())
		}
		return ""
	case reflect.Pointer:
		if want.IsNil() != got.IsNil() {
			return fmt.Sprintf("%s: sent nil=%v, got nil=%v", path, want.IsNil(), got.IsNil())
		}
		if want.IsNil() {
			return ""
		}
		return differ(want.Elem(), got.Elem(), path)
	case reflect.Slice:
		if want.IsNil() != got.IsNil() || want.Len() != got.Len() {
			return fmt.Sprintf("%s: sent %d items (nil=%v), got %d (nil=%v)", path, want.Len(), want.IsNil(), got.Len(), got.IsNil())
		}
		for i := range want.Len() {
			if d := differ(want.Index(i), got.Index(i), fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Map:
		if want.IsNil() != got.IsNil() || want.Len() != got.Len() {
			return fmt.Sprintf("%s: sent %d entries (nil=%v), got %d (nil=%v)", path, want.Len(), want.IsNil(), got.Len(), got.IsNil())
		}
		it := want.MapRange()
		for it.Next() {
			g := got.MapIndex(it.Key())
			if !g.IsValid() {
				return fmt.Sprintf("%s: key %v lost", path, it.Key())
			}
			if d := differ(it.Value(), g, fmt.Sprintf("%s[%v]", path, it.Key())); d != "" {
				return d
			}
		}
		return ""
	case reflect.Struct:
		for i := range t.NumField() {
			if !t.Field(i).IsExported() {
				continue
			}
			if d := differ(want.Field(i), got.Field(i), path+"."+t.Field(i).Name); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(want.Interface(), got.Interface()) {
		return fmt.Sprintf("%s: sent %#v, got %#v", path, want.Interface(), got.Interface())
	}
	return ""
}

// echo is the program's side: every call compares its request with the
// fill, writes to the request's log, and answers the filled response (its
// diagnostics replaced by the difference, if any).
type echo struct{}

func answer[Req, Resp any](req Req) Resp {
	want, _ := fill[Req]()
	resp, _ := fill[Resp]()
	if d := differ(reflect.ValueOf(want), reflect.ValueOf(req), fmt.Sprintf("%T", req)); d != "" {
		reflect.ValueOf(&resp).Elem().FieldByName("Diagnostics").Set(reflect.ValueOf(phases.Errorf("Request Differs", "The program received %s", d)))
	}
	rv := reflect.ValueOf(req)
	for i := range rv.NumField() {
		if w, ok := rv.Field(i).Interface().(io.Writer); ok && rv.Type().Field(i).Type == writerType && w != nil {
			fmt.Fprintf(w, "log of %T\n", req)
		}
	}
	return resp
}

func (echo) Schema() phases.Schema { return fake.Schema() }
func (echo) Configure(_ context.Context, r providers.ConfigureRequest) providers.ConfigureResponse {
	return answer[providers.ConfigureRequest, providers.ConfigureResponse](r)
}
func (echo) Read(_ context.Context, r providers.ReadRequest) providers.ReadResponse {
	return answer[providers.ReadRequest, providers.ReadResponse](r)
}
func (echo) Plan(_ context.Context, r providers.PlanRequest) providers.PlanResponse {
	return answer[providers.PlanRequest, providers.PlanResponse](r)
}
func (echo) Apply(_ context.Context, r providers.ApplyRequest) providers.ApplyResponse {
	return answer[providers.ApplyRequest, providers.ApplyResponse](r)
}
func (echo) Revert(_ context.Context, r providers.RevertRequest) providers.RevertResponse {
	return answer[providers.RevertRequest, providers.RevertResponse](r)
}
func (echo) InputDigest(_ context.Context, r providers.DigestRequest) providers.DigestResponse {
	return answer[providers.DigestRequest, providers.DigestResponse](r)
}

// fillOf is fill for a type known only at run time.
var fillOf = map[reflect.Type]func() (any, []string){}

func register[T any]() {
	fillOf[reflect.TypeFor[T]()] = func() (any, []string) { v, errs := fill[T](); return v, errs }
}

func init() {
	register[providers.ConfigureRequest]()
	register[providers.ConfigureResponse]()
	register[providers.ReadRequest]()
	register[providers.ReadResponse]()
	register[providers.PlanRequest]()
	register[providers.PlanResponse]()
	register[providers.ApplyRequest]()
	register[providers.ApplyResponse]()
	register[providers.RevertRequest]()
	register[providers.RevertResponse]()
	register[providers.DigestRequest]()
	register[providers.DigestResponse]()
}

// TestEveryFieldCrosses: every method of the provider interfaces, with
// every field of its request and response filled, through a real pipe.
func TestEveryFieldCrosses(t *testing.T) {
	prog := program(t)
	t.Setenv("MIGRATE_PLUGIN_TEST", "echo")
	p := plugin.Factory(prog)()
	defer p.(providers.Closer).Close()
	ctxType := reflect.TypeFor[context.Context]()
	n := 0
	for _, iface := range []reflect.Type{reflect.TypeFor[providers.Interface](), reflect.TypeFor[providers.Reverter](), reflect.TypeFor[providers.InputDigester]()} {
		for i := range iface.NumMethod() {
			m := iface.Method(i)
			if m.Name == "Schema" {
				continue // compiled in, never sent
			}
			if m.Type.NumIn() != 2 || m.Type.In(0) != ctxType || m.Type.NumOut() != 1 {
				t.Errorf("%s.%s is not func(context.Context, Request) Response: the plugin cannot carry it", iface, m.Name)
				continue
			}
			reqT, respT := m.Type.In(1), m.Type.Out(0)
			if fillOf[reqT] == nil || fillOf[respT] == nil {
				t.Errorf("%s.%s: register %s and %s in roundtrip_test.go", iface, m.Name, reqT, respT)
				continue
			}
			n++
			t.Run(m.Name, func(t *testing.T) {
				req, errs := fillOf[reqT]()
				want, errs2 := fillOf[respT]()
				for _, e := range append(errs, errs2...) {
					t.Errorf("cannot fill %s", e)
				}
				if _, ok := respT.FieldByName("Diagnostics"); !ok {
					t.Fatalf("%s has no Diagnostics: a transport error could not be reported", respT)
				}
				out := reflect.ValueOf(p).MethodByName(m.Name).Call([]reflect.Value{reflect.ValueOf(context.Background()), reflect.ValueOf(req)})[0]
				if d := differ(reflect.ValueOf(want), out, respT.String()); d != "" {
					t.Errorf("%s did not cross intact: %s\n(diagnostics: %v)", m.Name, d, out.FieldByName("Diagnostics").Interface())
				}
				rv := reflect.ValueOf(req)
				for i := range rv.NumField() {
					if rv.Type().Field(i).Type == writerType {
						got := rv.Field(i).Interface().(*bytes.Buffer).String()
						if want := fmt.Sprintf("log of %s\n", reqT); got != want {
							t.Errorf("%s.%s: the program's log arrived as %q, want %q", reqT, rv.Type().Field(i).Name, got, want)
						}
					}
				}
			})
		}
	}
	if n != 6 {
		t.Errorf("%d methods crossed, want the 6 of the protocol", n)
	}
}

// TestCodecNamesWhatItCannotCarry: a field of a kind the codec cannot
// carry fails the call with its name, before anything is sent.
func TestCodecNamesWhatItCannotCarry(t *testing.T) {
	type withFunc struct{ Callback func() }
	type withChan struct{ Done chan int }
	type withAny struct{ Anything any }
	type withIntKeys struct{ ByNumber map[int]string }
	type withHidden struct {
		Shown  string
		hidden string
	}
	type nested struct{ Inner *withChan }
	for _, c := range []struct {
		v    any
		want string
	}{
		{withFunc{}, "withFunc.Callback"},
		{withChan{}, "withChan.Done"},
		{withAny{}, "withAny.Anything"},
		{withIntKeys{}, "withIntKeys.ByNumber"},
		{withHidden{Shown: "x", hidden: "y"}, "withHidden.hidden"},
		{nested{}, "withChan.Done"},
	} {
		err := plugin.RoundTrip(c.v, reflect.New(reflect.TypeOf(c.v)).Interface())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%T: the codec said %v, want an error naming %s", c.v, err, c.want)
		}
	}
	// The funcs it leaves out are the ones it lists, with a reason each.
	for name, why := range plugin.NotCarried {
		if why == "" {
			t.Errorf("%s is not carried, and nothing says why", name)
		}
	}
}

// TestCodecKeepsNilApartFromEmpty: in one process, the codec gives back
// nil as nil and empty as empty (a json.RawMessage "" is not absent).
func TestCodecKeepsNilApartFromEmpty(t *testing.T) {
	for _, v := range []providers.ApplyResponse{
		{},
		{Private: []byte{}, Facts: map[string]string{}, Diagnostics: phases.Diagnostics{}},
		{Revert: &providers.RevertData{}, Outputs: cty.EmptyObjectVal, Facts: map[string]string{"": ""}},
	} {
		var got providers.ApplyResponse
		if err := plugin.RoundTrip(v, &got); err != nil {
			t.Fatal(err)
		}
		if d := differ(reflect.ValueOf(v), reflect.ValueOf(got), "ApplyResponse"); d != "" {
			t.Errorf("%s", d)
		}
	}
}
