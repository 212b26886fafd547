package reference

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// Event documents one kind of event of the --json stream.
type Event struct {
	Kind string
	Says string
	// Fields are the fields it may carry besides kind and time.
	Fields []string
}

// Field documents one field of an event's JSON object.
type Field struct {
	Name string
	Says string
}

// WriteEvents writes, as Markdown, the reference of the events that run
// and rollback write with --json: their fields, then every kind (the
// engine's list: views.EventKinds and views.EventFields).
func WriteEvents(w io.Writer, fields []Field, events []Event) error {
	var b bytes.Buffer
	b.WriteString("\n## The `--json` events\n\n")
	b.WriteString("`migrate run --json` and `migrate rollback --json` write one JSON object per line on standard output, " +
		"one per event, and nothing else (messages for people go to standard error). " +
		"Every object has `kind` and `time`; the other fields appear when they have a value. " +
		"A consumer goes by `kind`: a `message` is for people and its words may change.\n\n")
	b.WriteString("| field | description |\n|---|---|\n")
	for _, f := range fields {
		fmt.Fprintf(&b, "| `%s` | %s |\n", f.Name, cell(text(f.Says)))
	}
	b.WriteString("\n| kind | what happened | fields besides `kind` and `time` |\n|---|---|---|\n")
	for _, e := range events {
		names := make([]string, len(e.Fields))
		for i, f := range e.Fields {
			names[i] = "`" + f + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", e.Kind, cell(text(e.Says)), strings.Join(names, ", "))
	}
	_, err := w.Write(b.Bytes())
	return err
}
