package incushost

import (
	"fmt"
	"net/http"
	"strings"
)

// api_filtering for the instance list: ?filter= with clauses "KEY eq
// VALUE" or "KEY ne VALUE" joined by "and" (what `incus list lab:
// status=running` sends); KEY is a field of the instance (name, status,
// type...) or a dotted path into it (config.user.lab). Values compare
// case-insensitively. or, not and parentheses are refused.
type filterClause struct {
	key, value string
	negate     bool
}

func parseFilter(f string) ([]filterClause, error) {
	if strings.TrimSpace(f) == "" {
		return nil, nil
	}
	var out []filterClause
	for _, part := range strings.Split(f, " and ") {
		fields := strings.SplitN(strings.TrimSpace(part), " ", 3)
		if len(fields) != 3 || (fields[1] != "eq" && fields[1] != "ne") || strings.ContainsAny(part, "()") {
			return nil, errf(http.StatusBadRequest, "Invalid filter: the lab host takes only KEY eq|ne VALUE clauses joined by and (%q)", f)
		}
		out = append(out, filterClause{key: fields[0], value: strings.Trim(fields[2], `"`), negate: fields[1] == "ne"})
	}
	return out, nil
}

func matchFilter(obj map[string]any, clauses []filterClause) bool {
	for _, c := range clauses {
		v, _ := lookupField(obj, c.key)
		if strings.EqualFold(v, c.value) == c.negate {
			return false
		}
	}
	return true
}

// lookupField finds key in obj, as a field or a dotted path.
func lookupField(obj map[string]any, key string) (string, bool) {
	if v, ok := obj[key]; ok {
		return fmt.Sprint(v), true
	}
	for i := strings.Index(key, "."); i > 0; i = nextDot(key, i) {
		switch sub := obj[key[:i]].(type) {
		case map[string]any:
			if v, ok := lookupField(sub, key[i+1:]); ok {
				return v, true
			}
		case map[string]string:
			if v, ok := sub[key[i+1:]]; ok {
				return v, true
			}
		}
	}
	return "", false
}

func nextDot(key string, i int) int {
	j := strings.Index(key[i+1:], ".")
	if j < 0 {
		return -1
	}
	return i + 1 + j
}
