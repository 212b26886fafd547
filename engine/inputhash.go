package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// A step's input hash, kept in its record, says whether it runs again:
// its evaluated attributes (secrets included: a changed password is a
// change) and what its provider adds (InputDigester: the files it
// reads). A plain hash of a weak secret can be guessed offline by anyone
// who holds a copy of the state, so with an input key (Options.InputKey)
// the hash is an HMAC-SHA256 under it, written
// "hmac-sha256:KEYID:HEX", KEYID naming the key without revealing it. A
// record hashed before (plain hex SHA-256) is compared the old way; the
// run that finds it unchanged writes it again keyed (and with the files
// its step type reads now, when it did not digest them then).
//
// The attributes hashed leave out those that are null (not set): a
// provider that gains an attribute, in a new release of migrate, does not
// make every done step of its types look changed. Such hashes are
// written "hmac-sha256-v2:KEYID:HEX" (or "sha256-v2:HEX" without a key);
// a record of the form before ("hmac-sha256:", nulls included) is
// compared that way and written again in the new one.

const (
	keyedPrefix   = "hmac-sha256-v2:"
	keyedPrefixV1 = "hmac-sha256:"
	plainPrefix   = "sha256-v2:"
)

// inputs is a step's input hash now, and the plain ones an older record
// may hold; all empty when the inputs are not known yet.
type inputs struct {
	hash, plain string
	// keyedV1 is the keyed hash with null attributes included, as
	// records made before held it.
	keyedV1 string
	// bare is the plain hash of the attributes alone: a record made
	// before its step type digested the files it reads (helm_release,
	// an exec step's script) holds it, and is no evidence that they
	// changed.
	bare string
	// attrs is hash without the files (plannedHash, facts.go).
	attrs string
}

// matches reports whether a record made with recorded ran with these
// inputs.
func (in inputs) matches(recorded string) bool {
	switch {
	case in.hash == "" || recorded == "":
		return false
	case strings.HasPrefix(recorded, keyedPrefix), strings.HasPrefix(recorded, plainPrefix):
		return recorded == in.hash
	case strings.HasPrefix(recorded, keyedPrefixV1):
		return recorded == in.keyedV1
	}
	return recorded == in.plain || recorded == in.bare
}

// stale reports whether recorded, which matches, is in the old form.
func (in inputs) stale(recorded string) bool {
	return in.matches(recorded) && recorded != in.hash
}

// mac is the hex HMAC-SHA256 of attributes and a digest under the input
// key.
func (e *Engine) mac(attrs []byte, digest string) string {
	m := hmac.New(sha256.New, e.inputKey)
	m.Write(attrs)
	m.Write([]byte{0})
	m.Write([]byte(digest))
	return hex.EncodeToString(m.Sum(nil))
}

// attrBytes is the canonical encoding of a step's evaluated attributes:
// their type, a NUL, their JSON; with setOnly, without the attributes of
// objects that are null. Not ok when they are not wholly known.
func attrBytes(v cty.Value, setOnly bool) ([]byte, bool) {
	plain, _ := v.UnmarkDeep()
	if !plain.IsWhollyKnown() {
		return nil, false
	}
	if setOnly {
		plain = withoutNulls(plain)
	}
	b, err := ctyjson.Marshal(plain, plain.Type())
	if err != nil {
		return nil, false
	}
	ty, err := ctyjson.MarshalType(plain.Type())
	if err != nil {
		return nil, false
	}
	return append(append(ty, 0), b...), true
}

// withoutNulls is v with every null attribute of its objects left out,
// at any depth. Lists and sets become tuples, maps objects: their
// elements may no longer share one type, and the encoding only hashes
// (an attribute's schema fixes which of them it is).
func withoutNulls(v cty.Value) cty.Value {
	if v.IsNull() {
		return v
	}
	ty := v.Type()
	switch {
	case ty.IsObjectType() || ty.IsMapType():
		attrs := map[string]cty.Value{}
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			if e.IsNull() && ty.IsObjectType() {
				continue
			}
			attrs[k.AsString()] = withoutNulls(e)
		}
		return cty.ObjectVal(attrs)
	case ty.IsListType() || ty.IsSetType() || ty.IsTupleType():
		var elems []cty.Value
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			elems = append(elems, withoutNulls(e))
		}
		return cty.TupleVal(elems)
	}
	return v
}

// plainHash is the input hash as records held it before hashes were
// keyed.
func plainHash(attrs []byte, digest string) string {
	sum := sha256.Sum256(attrs)
	h := hex.EncodeToString(sum[:])
	if digest == "" {
		return h
	}
	sum = sha256.Sum256([]byte(h + "\x00" + digest))
	return hex.EncodeToString(sum[:])
}

// keyID names the input key in the hashes it made: a record made under
// another key says so instead of "inputs changed".
func (e *Engine) keyID() string {
	mac := hmac.New(sha256.New, e.inputKey)
	mac.Write([]byte("migrate input key id"))
	return hex.EncodeToString(mac.Sum(nil))[:8]
}
