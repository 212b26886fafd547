package sqlitefile

import (
	"errors"
	"strings"
)

// column is a column of a CREATE TABLE statement.
type column struct {
	name       string
	rowidAlias bool // INTEGER PRIMARY KEY: the record holds NULL, the value is the rowid
}

// tableConstraints start a table constraint, not a column, in the list.
var tableConstraints = []string{"CONSTRAINT", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN"}

// columnDefs are the columns of a CREATE TABLE statement, in order.
func columnDefs(sql string) ([]column, bool, error) {
	open := strings.IndexByte(sql, '(')
	end := strings.LastIndexByte(sql, ')')
	if open < 0 || end < open {
		return nil, false, errors.New("no column list in its CREATE TABLE statement")
	}
	withoutRowid := strings.Contains(strings.ToUpper(sql[end:]), "WITHOUT ROWID")
	var cols []column
	for _, def := range splitTopLevel(sql[open+1 : end]) {
		words := sqlWords(def)
		if len(words) == 0 {
			continue
		}
		if first := strings.ToUpper(words[0]); !isQuoted(def) && containsFold(tableConstraints, first) {
			continue
		}
		upper := strings.ToUpper(strings.Join(words[1:], " "))
		cols = append(cols, column{name: unquote(words[0]),
			rowidAlias: strings.HasPrefix(upper, "INTEGER") && strings.Contains(upper, "PRIMARY KEY") && !strings.Contains(upper, "PRIMARY KEY DESC")})
	}
	if len(cols) == 0 {
		return nil, false, errors.New("no column in its CREATE TABLE statement")
	}
	return cols, withoutRowid, nil
}

// splitTopLevel splits a column list at the commas outside parentheses
// and quotes.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '[':
			quote = ']'
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// sqlWords splits a definition into words, a quoted name being one.
func sqlWords(s string) []string {
	var words []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		end := strings.IndexAny(s, " \t\r\n(")
		if closer := map[byte]byte{'"': '"', '`': '`', '[': ']', '\'': '\''}[s[0]]; closer != 0 {
			if i := strings.IndexByte(s[1:], closer); i >= 0 {
				end = i + 2
			}
		}
		if end == 0 {
			end = 1
		}
		if end < 0 {
			end = len(s)
		}
		words, s = append(words, s[:end]), s[end:]
	}
	return words
}

func isQuoted(def string) bool {
	d := strings.TrimSpace(def)
	return d != "" && strings.ContainsRune("\"`['", rune(d[0]))
}

func unquote(w string) string {
	if len(w) >= 2 && strings.ContainsRune("\"`['", rune(w[0])) {
		return w[1 : len(w)-1]
	}
	return w
}

func containsFold(list []string, s string) bool {
	for _, l := range list {
		if strings.EqualFold(l, s) {
			return true
		}
	}
	return false
}
