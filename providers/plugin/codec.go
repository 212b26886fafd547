package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"sync"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
)

// The codec turns any request or response of package providers into one
// JSON object and back, by reflection over its fields, so that a field
// added to a request crosses the pipe without a line changing here:
//
//   - a cty.Value crosses as value (msgpack, sensitive paths);
//   - an io.Writer (Log) does not cross: the decoder gives it the call's
//     log stream, whose lines the host writes to the caller's writer;
//   - a <-chan struct{} (an Apply's Stop) crosses as true when set: the
//     decoder gives it the call's stop channel, which the program closes
//     when the host sends the call's stop line;
//   - a func(providers.RevertData) error (an Apply's Intent) crosses as
//     true when set: the decoder gives it the call's intent, which sends
//     the revert data to the host and returns once the host saved it
//     (or says why not);
//   - any other func crosses only if it is in notCarried, which says why it may
//     arrive nil; any other func is an error;
//   - structs, pointers, slices, string-keyed maps and numbers, strings,
//     booleans and bytes cross as JSON, nil kept apart from empty.
//
// Anything else (a channel, an interface, an unexported field) makes the
// type refused as a whole, naming the field, before anything is sent.

// notCarried lists the func fields that arrive nil, and why that is right.
var notCarried = map[string]string{
	"providers.Approval.Prompt": "no plugin step asks a person: only the built-in approval step prompts",
}

var (
	ctyValueType = reflect.TypeFor[cty.Value]()
	writerType   = reflect.TypeFor[io.Writer]()
	stopType     = reflect.TypeFor[<-chan struct{}]()
	intentType   = reflect.TypeFor[func(providers.RevertData) error]()
)

// intentFunc is an Apply's Intent.
type intentFunc = func(providers.RevertData) error

// streams are what a call carries besides its fields' values: the log
// its io.Writer field writes to, the stop channel of its
// <-chan struct{} field, and its Intent.
type streams struct {
	log    io.Writer
	stop   <-chan struct{}
	intent intentFunc
	// secrets are the sensitive parts of the values that crossed, with
	// their marks: what the program's stderr is scrubbed of.
	secrets []cty.Value
}

// checked caches checkType's verdict per type.
var checked sync.Map // reflect.Type -> error

// checkType says whether every field of t can cross, naming the first
// that cannot. It looks at the type, not a value, so a field that is
// zero in every test still fails.
func checkType(t reflect.Type) error {
	if err, ok := checked.Load(t); ok {
		e, _ := err.(error)
		return e
	}
	err := checkIn(t, t.String(), map[reflect.Type]bool{})
	checked.Store(t, err)
	return err
}

func checkIn(t reflect.Type, name string, seen map[reflect.Type]bool) error {
	if t == ctyValueType || t == writerType || t == stopType || t == intentType {
		return nil
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return nil
	case reflect.Pointer, reflect.Slice:
		return checkIn(t.Elem(), name+"[]", seen)
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return fmt.Errorf("the plugin protocol cannot carry %s: a map whose keys are not strings (%s)", name, t)
		}
		return checkIn(t.Elem(), name+"[]", seen)
	case reflect.Struct:
		if seen[t] {
			return nil
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			fname := t.String() + "." + f.Name
			if !f.IsExported() {
				return fmt.Errorf("the plugin protocol cannot carry %s: an unexported field", fname)
			}
			if f.Type.Kind() == reflect.Func && f.Type != intentType {
				if _, ok := notCarried[fname]; !ok {
					return fmt.Errorf("the plugin protocol cannot carry %s: a func (add it to notCarried, saying why it may arrive nil)", fname)
				}
				continue
			}
			if err := checkIn(f.Type, fname, seen); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("the plugin protocol cannot carry %s: a %s (%s)", name, t.Kind(), t)
}

// encode writes v, a struct, as a JSON object, and returns the writer of
// its io.Writer field (the call's log), the channel of its stop field and
// its intent, if any.
func encode(v any) (json.RawMessage, streams, error) {
	rv := reflect.ValueOf(v)
	if err := checkType(rv.Type()); err != nil {
		return nil, streams{}, err
	}
	var e encoder
	if err := e.value(rv, rv.Type().String()); err != nil {
		return nil, streams{}, err
	}
	return e.buf.Bytes(), streams{log: e.log, stop: e.stop, intent: e.intent, secrets: e.secrets}, nil
}

type encoder struct {
	buf     bytes.Buffer
	log     io.Writer
	stop    <-chan struct{}
	intent  intentFunc
	secrets []cty.Value
}

func (e *encoder) value(v reflect.Value, name string) error {
	t := v.Type()
	switch t {
	case ctyValueType:
		if cv := v.Interface().(cty.Value); cv != cty.NilVal && cv.ContainsMarked() {
			e.secrets = append(e.secrets, cv)
		}
		w, err := encodeValue(v.Interface().(cty.Value))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return e.json(w)
	case writerType:
		return e.writer(v, name)
	case stopType:
		return e.stopChan(v)
	case intentType:
		return e.intentFunc(v)
	}
	switch t.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			e.buf.WriteString("null")
			return nil
		}
		return e.value(v.Elem(), name)
	case reflect.Slice:
		return e.slice(v, name)
	case reflect.Map:
		return e.mapValue(v, name)
	case reflect.Struct:
		return e.structValue(v)
	case reflect.String:
		return e.json(v.String())
	case reflect.Bool:
		return e.json(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return e.json(v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return e.json(v.Uint())
	case reflect.Float32, reflect.Float64:
		return e.json(v.Float())
	}
	return fmt.Errorf("the plugin protocol cannot carry %s (%s)", name, t) // checkType let it through: a bug here
}

// writer takes the call's log; it is not written: the call's log carries
// what is written to it.
func (e *encoder) writer(v reflect.Value, name string) error {
	if !v.IsNil() {
		if e.log != nil && e.log != v.Interface() {
			return fmt.Errorf("a second writer in one message (a call has one log)")
		}
		e.log = v.Interface().(io.Writer)
	}
	if name != "" {
		e.buf.WriteString("null") // in a slice or map: a place kept
	}
	return nil
}

// stopChan writes not the channel but that there is one: its closing
// crosses as the call's stop line.
func (e *encoder) stopChan(v reflect.Value) error {
	if v.IsNil() {
		e.buf.WriteString("null")
		return nil
	}
	ch := v.Interface().(<-chan struct{})
	if e.stop != nil && e.stop != ch {
		return fmt.Errorf("a second stop channel in one message (a call has one)")
	}
	e.stop = ch
	e.buf.WriteString("true")
	return nil
}

// intentFunc writes not the func but that there is one: the program's
// calls of it cross as the call's intent lines.
func (e *encoder) intentFunc(v reflect.Value) error {
	if v.IsNil() {
		e.buf.WriteString("null")
		return nil
	}
	if e.intent != nil {
		return fmt.Errorf("a second intent in one message (a call has one)")
	}
	e.intent = v.Interface().(intentFunc)
	e.buf.WriteString("true")
	return nil
}

func (e *encoder) slice(v reflect.Value, name string) error {
	if v.IsNil() {
		e.buf.WriteString("null")
		return nil
	}
	if v.Type().Elem().Kind() == reflect.Uint8 {
		return e.json(v.Bytes()) // base64
	}
	e.buf.WriteByte('[')
	for i := range v.Len() {
		if i > 0 {
			e.buf.WriteByte(',')
		}
		if err := e.value(v.Index(i), name+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
	}
	e.buf.WriteByte(']')
	return nil
}

func (e *encoder) mapValue(v reflect.Value, name string) error {
	if v.IsNil() {
		e.buf.WriteString("null")
		return nil
	}
	e.buf.WriteByte('{')
	it := v.MapRange()
	for i := 0; it.Next(); i++ {
		if i > 0 {
			e.buf.WriteByte(',')
		}
		k := it.Key().String()
		if err := e.json(k); err != nil {
			return err
		}
		e.buf.WriteByte(':')
		if err := e.value(it.Value(), name+"["+strconv.Quote(k)+"]"); err != nil {
			return err
		}
	}
	e.buf.WriteByte('}')
	return nil
}

// structValue writes the fields that are set, by name.
func (e *encoder) structValue(v reflect.Value) error {
	t := v.Type()
	e.buf.WriteByte('{')
	n := 0
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		if f.Type == writerType {
			if err := e.value(fv, ""); err != nil { // the log: taken, not written
				return err
			}
			continue
		}
		if f.Type.Kind() == reflect.Func && f.Type != intentType || fv.IsZero() {
			continue // a func of notCarried, or nothing to say
		}
		if n > 0 {
			e.buf.WriteByte(',')
		}
		n++
		e.buf.WriteString(strconv.Quote(f.Name))
		e.buf.WriteByte(':')
		if err := e.value(fv, t.String()+"."+f.Name); err != nil {
			return err
		}
	}
	e.buf.WriteByte('}')
	return nil
}

func (e *encoder) json(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	e.buf.Write(b)
	return nil
}

// decode reads into *ptr, a struct, what encode wrote; its io.Writer
// fields get log, the call's log stream.
func decode(data json.RawMessage, ptr any, log io.Writer) error {
	_, err := decodeSecrets(data, ptr, log)
	return err
}

// decodeSecrets is decode that also returns the values it read that hold
// sensitive parts (outputs the program marked sensitive), for a
// Scrubber's AddMarked.
func decodeSecrets(data json.RawMessage, ptr any, log io.Writer) ([]cty.Value, error) {
	rv := reflect.ValueOf(ptr).Elem()
	if err := checkType(rv.Type()); err != nil {
		return nil, err
	}
	d := decoder{log: log}
	err := d.value(data, rv, rv.Type().String())
	return d.secrets, err
}

// decodeCall is decode with the call's streams: its io.Writer fields get
// st.log, a stop field that was set gets st.stop, an intent st.intent.
func decodeCall(data json.RawMessage, ptr any, st streams) error {
	rv := reflect.ValueOf(ptr).Elem()
	if err := checkType(rv.Type()); err != nil {
		return err
	}
	d := decoder{log: st.log, stop: st.stop, intent: st.intent}
	return d.value(data, rv, rv.Type().String())
}

type decoder struct {
	log     io.Writer
	stop    <-chan struct{}
	intent  intentFunc
	secrets []cty.Value
}

func (d *decoder) value(data json.RawMessage, v reflect.Value, name string) error {
	t := v.Type()
	if t == writerType {
		if d.log != nil {
			v.Set(reflect.ValueOf(d.log))
		}
		return nil
	}
	if bytes.Equal(data, []byte("null")) {
		v.SetZero()
		return nil
	}
	switch t {
	case stopType:
		return d.stopChan(data, v, name)
	case intentType:
		return d.intentFunc(data, v, name)
	case ctyValueType:
		var w value
		if err := json.Unmarshal(data, &w); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		cv, err := decodeValue(w)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if cv != cty.NilVal && cv.ContainsMarked() {
			d.secrets = append(d.secrets, cv)
		}
		v.Set(reflect.ValueOf(cv))
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		if err := d.value(data, p.Elem(), name); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.Slice:
		return d.slice(data, v, name)
	case reflect.Map:
		return d.mapValue(data, v, name)
	case reflect.Struct:
		return d.structValue(data, v, name)
	}
	return scalar(data, v, name)
}

// stopChan sets the call's stop channel where the other side had one.
func (d *decoder) stopChan(data json.RawMessage, v reflect.Value, name string) error {
	var set bool
	if err := json.Unmarshal(data, &set); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if set {
		if d.stop == nil {
			return fmt.Errorf("%s: a stop channel where the call has none", name)
		}
		v.Set(reflect.ValueOf(d.stop))
	}
	return nil
}

// intentFunc sets the call's intent where the other side had one.
func (d *decoder) intentFunc(data json.RawMessage, v reflect.Value, name string) error {
	var set bool
	if err := json.Unmarshal(data, &set); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if set {
		if d.intent == nil {
			return fmt.Errorf("%s: an intent where the call has none", name)
		}
		v.Set(reflect.ValueOf(d.intent))
	}
	return nil
}

func (d *decoder) slice(data json.RawMessage, v reflect.Value, name string) error {
	t := v.Type()
	if t.Elem().Kind() == reflect.Uint8 {
		var b []byte
		if err := json.Unmarshal(data, &b); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if b == nil {
			b = []byte{} // "" is an empty slice, not a nil one
		}
		v.SetBytes(b)
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	s := reflect.MakeSlice(t, len(items), len(items))
	for i, item := range items {
		if err := d.value(item, s.Index(i), name+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
	}
	v.Set(s)
	return nil
}

func (d *decoder) mapValue(data json.RawMessage, v reflect.Value, name string) error {
	t := v.Type()
	var items map[string]json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	m := reflect.MakeMapWithSize(t, len(items))
	for k, item := range items {
		e := reflect.New(t.Elem()).Elem()
		if err := d.value(item, e, name+"["+strconv.Quote(k)+"]"); err != nil {
			return err
		}
		m.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), e)
	}
	v.Set(m)
	return nil
}

// structValue reads the fields sent, by name; one this side does not have
// is an error.
func (d *decoder) structValue(data json.RawMessage, v reflect.Value, name string) error {
	t := v.Type()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	v.SetZero()
	for i := range t.NumField() {
		f := t.Field(i)
		fname := t.String() + "." + f.Name
		if f.Type == writerType {
			if err := d.value(nil, v.Field(i), fname); err != nil {
				return err
			}
			delete(fields, f.Name)
			continue
		}
		raw, ok := fields[f.Name]
		if !ok {
			continue
		}
		delete(fields, f.Name)
		if err := d.value(raw, v.Field(i), fname); err != nil {
			return err
		}
	}
	for k := range fields {
		// Both sides speak the same protocol version: a field this
		// side does not know is a bug, not something to drop.
		return fmt.Errorf("%s has no field %s that the other side sent", t, k)
	}
	return nil
}

// scalar reads a string, a bool or a number.
func scalar(data json.RawMessage, v reflect.Value, name string) error {
	var err error
	switch v.Kind() {
	case reflect.String:
		var s string
		err = json.Unmarshal(data, &s)
		v.SetString(s)
	case reflect.Bool:
		var b bool
		err = json.Unmarshal(data, &b)
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var n int64
		err = json.Unmarshal(data, &n)
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		var n uint64
		err = json.Unmarshal(data, &n)
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		var f float64
		err = json.Unmarshal(data, &f)
		v.SetFloat(f)
	default:
		return fmt.Errorf("the plugin protocol cannot carry %s (%s)", name, v.Type())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
