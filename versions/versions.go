package versions

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Version is a version reduced to what orders releases: its numbers
// (10.10.7) and, for a pre-release, its stage and number (rc 1).
type Version struct {
	Numbers []int
	// Pre is a pre-release's stage ("alpha", "beta", "rc", "pre",
	// "dev"), "" for a release. A pre-release comes before its release.
	Pre    string
	PreNum int
}

// preStages orders the pre-release stages; an unknown stage ranks with
// "pre".
var preStages = []string{"dev", "alpha", "a", "beta", "b", "pre", "rc"}

// Parse reads a version as a Debian package or an image tag writes it.
// It drops what does not order releases: a Debian epoch (1:), a leading
// v, build metadata and Debian suffixes (+bookworm1, +deb12), a Debian
// revision or an image variant (-1, -tensorrt, -f4f3cfa). ok is false
// when s starts with no number (latest, stable, a digest).
func Parse(s string) (v Version, ok bool) {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, ':'); i > 0 && allDigits(s[:i]) {
		s = s[i+1:] // the epoch: Debian's own ordering, not the upstream's
	}
	s = strings.TrimPrefix(strings.TrimPrefix(s, "v"), "V")
	for {
		n, rest := leadingNumber(s)
		if n < 0 {
			break
		}
		v.Numbers = append(v.Numbers, n)
		s = rest
		if len(s) < 2 || s[0] != '.' || !isDigit(s[1]) {
			break
		}
		s = s[1:]
	}
	if len(v.Numbers) == 0 {
		return Version{}, false
	}
	v.Pre, v.PreNum = preRelease(s)
	return v, true
}

// preRelease reads a pre-release marker at the start of what follows the
// numbers: ~rc1 (Debian), -rc1, -beta3, rc1, .rc1, b2. Anything else
// (+deb12, -1, -tensorrt) is no pre-release.
func preRelease(s string) (stage string, n int) {
	sep := s != "" && strings.ContainsRune("~-.", rune(s[0]))
	if sep {
		s = s[1:]
	}
	lower := strings.ToLower(s)
	for _, st := range slices.Backward(preStages) { // longest names first: "alpha" before "a"
		rest, ok := strings.CutPrefix(lower, st)
		if !ok {
			continue
		}
		rest = strings.TrimLeft(rest, ".-")
		// "a" and "b" only as PEP 440 writes them, 1.0a1: -a1b2c3d is a
		// commit, not an alpha.
		if len(st) == 1 && (sep || rest == "" || !isDigit(rest[0])) {
			continue
		}
		if rest != "" && !isDigit(rest[0]) && !strings.ContainsRune("+-~.", rune(rest[0])) {
			continue // a word that only starts like a stage: -betamax
		}
		num, _ := leadingNumber(rest)
		return canonicalStage(st), max(num, 0)
	}
	return "", 0
}

func canonicalStage(st string) string {
	switch st {
	case "a":
		return "alpha"
	case "b":
		return "beta"
	}
	return st
}

// Compare orders two parsed versions: -1 when a is older than b, 0 when
// they are the same release, +1 when a is newer. Missing numbers are 0
// (10.10 is 10.10.0).
func (a Version) Compare(b Version) int {
	for i := range max(len(a.Numbers), len(b.Numbers)) {
		if c := cmp.Compare(at(a.Numbers, i), at(b.Numbers, i)); c != 0 {
			return c
		}
	}
	switch {
	case a.Pre == "" && b.Pre == "":
		return 0
	case a.Pre == "":
		return 1
	case b.Pre == "":
		return -1
	}
	return cmp.Or(cmp.Compare(stageRank(a.Pre), stageRank(b.Pre)), cmp.Compare(a.PreNum, b.PreNum))
}

// String writes the version back: its numbers, and its pre-release.
func (v Version) String() string {
	parts := make([]string, len(v.Numbers))
	for i, n := range v.Numbers {
		parts[i] = strconv.Itoa(n)
	}
	s := strings.Join(parts, ".")
	if v.Pre != "" {
		s += "-" + v.Pre + strconv.Itoa(v.PreNum)
	}
	return s
}

// Compare compares two versions as text (see Parse); ok is false when
// either is not a version, and then nothing can be said.
func Compare(a, b string) (c int, ok bool) {
	va, oka := Parse(a)
	vb, okb := Parse(b)
	if !oka || !okb {
		return 0, false
	}
	return va.Compare(vb), true
}

// Older says whether a is a version older than b; false when either is
// not a version.
func Older(a, b string) bool {
	c, ok := Compare(a, b)
	return ok && c < 0
}

// Tag is the tag of an image reference ("" when it has none, or only a
// digest): jellyfin/jellyfin:10.10.7 -> 10.10.7, and a registry's port
// (registry:5000/app) is not a tag.
func Tag(image string) string {
	image, _, _ = strings.Cut(image, "@") // a digest
	slash := strings.LastIndexByte(image, '/')
	colon := strings.LastIndexByte(image, ':')
	if colon <= slash {
		return ""
	}
	return image[colon+1:]
}

// Repository is an image reference without its tag and digest.
func Repository(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if t := Tag(image); t != "" {
		return image[:len(image)-len(t)-1]
	}
	return image
}

func stageRank(st string) int {
	if i := slices.Index(preStages, st); i >= 0 {
		return i
	}
	return slices.Index(preStages, "pre")
}

func at(ns []int, i int) int {
	if i < len(ns) {
		return ns[i]
	}
	return 0
}

// leadingNumber reads the decimal number s starts with (-1 when none);
// one too big for an int is the biggest int, so that order still holds.
func leadingNumber(s string) (int, string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == 0 {
		return -1, s
	}
	n, err := strconv.Atoi(s[:i])
	if err != nil {
		n = math.MaxInt
	}
	return n, s[i:]
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

func allDigits(s string) bool {
	for i := range len(s) {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}
