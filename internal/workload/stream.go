package workload

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"

	yamlv3 "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// A file is read as kubectl reads it (k8s.io/apimachinery's YAMLOrJSONDecoder):
// a stream of JSON objects when its first character is {, else YAML documents
// cut at the lines that begin with --- (the line ends of Windows as well),
// each document decoded as YAML to JSON. Unlike kubectl, a document that
// does not decode is an error of its own and the next one is still read, and
// each error names the line.

// document is one document of a stream.
type document struct {
	index int   // from 1
	line  int   // the line it begins at, from 1
	value any   // decoded: a map for an object; nil for an empty one
	err   error // it does not decode
	more  error // it decodes, with something after it left unread
}

// utf8Text returns data as UTF-8: a UTF-8 byte order mark dropped, UTF-16
// (little or big endian, told by its byte order mark, as PowerShell writes
// it) converted.
func utf8Text(data []byte) ([]byte, error) {
	switch {
	case bytes.HasPrefix(data, []byte{0xef, 0xbb, 0xbf}):
		return data[3:], nil
	case bytes.HasPrefix(data, []byte{0xff, 0xfe, 0, 0}), bytes.HasPrefix(data, []byte{0, 0, 0xfe, 0xff}):
		return nil, errors.New("UTF-32 text: save it as UTF-8")
	case bytes.HasPrefix(data, []byte{0xff, 0xfe}):
		return fromUTF16(data[2:], binary.LittleEndian)
	case bytes.HasPrefix(data, []byte{0xfe, 0xff}):
		return fromUTF16(data[2:], binary.BigEndian)
	}
	return data, nil
}

func fromUTF16(data []byte, order binary.ByteOrder) ([]byte, error) {
	if len(data)%2 != 0 {
		return nil, fmt.Errorf("UTF-16 text of an odd number of bytes (%d): cut short", len(data)+2)
	}
	units := make([]uint16, len(data)/2)
	for i := range units {
		units[i] = order.Uint16(data[2*i:])
	}
	return []byte(string(utf16.Decode(units))), nil
}

// decodeStream cuts data into its documents and decodes each. errs are
// the separator lines kubectl refuses.
func decodeStream(data []byte) (docs []document, errs []lineError) {
	if bytes.HasPrefix(bytes.TrimLeftFunc(data, unicode.IsSpace), []byte("{")) {
		if docs, ok := decodeJSON(data); ok {
			return docs, nil
		}
	}
	return decodeYAML(data, 1, 1)
}

// decodeJSON reads data as a stream of JSON values. As kubectl does, a
// stream whose first value does not decode, or whose second does not, is
// YAML after the values read (ok false when that is the whole of it).
// Past two values an error ends the stream: JSON cannot be read beyond it.
func decodeJSON(data []byte) ([]document, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var docs []document
	end := 0 // where the last value decoded ends
	lineAt := lineCounter(data)
	for {
		start := end + len(data[end:]) - len(bytes.TrimLeftFunc(data[end:], unicode.IsSpace))
		endLine, startLine := lineAt(end), lineAt(start)
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			return docs, true
		}
		if err != nil {
			at := start
			var se *json.SyntaxError
			if errors.As(err, &se) {
				at = int(se.Offset)
			}
			jerr := document{index: len(docs) + 1, line: startLine,
				err: fmt.Errorf("%w (line %d); the objects after it are not read", err, lineAt(at))}
			if len(docs) > 1 {
				return append(docs, jerr), true
			}
			if len(docs) == 0 {
				return nil, false
			}
			// One value, then something else: the rest may be YAML.
			rest, errs := decodeYAML(data[end:], endLine, 2)
			for _, d := range rest {
				if d.err != nil || d.more != nil {
					return append(docs, jerr), true
				}
			}
			if len(errs) > 0 {
				return append(docs, jerr), true
			}
			return append(docs, rest...), true
		}
		docs = append(docs, document{index: len(docs) + 1, line: startLine, value: v})
		end = int(dec.InputOffset())
	}
}

// lineCounter returns a function that says the line, from 1, of data's
// byte at an offset; each offset asked is at least the one before.
func lineCounter(data []byte) func(offset int) int {
	at, line := 0, 1
	return func(offset int) int {
		offset = min(offset, len(data))
		if offset > at {
			line += bytes.Count(data[at:offset], []byte("\n"))
			at = offset
		}
		return line
	}
}

// lineError is an error at a line of the file.
type lineError struct {
	line int
	err  error
}

// decodeYAML cuts data, whose first line is the file's line first, into
// YAML documents at the lines that begin with ---, as kubectl cuts them, and
// decodes each; the first is numbered index. What precedes the first
// separator is a document only when it has more than blank lines and
// comments. A separator followed by anything but a comment is refused by
// kubectl: it is an error, and the document is still read, what follows ---
// on the line included, as YAML reads it.
func decodeYAML(data []byte, first, index int) (docs []document, errs []lineError) {
	var (
		buf      bytes.Buffer
		start    = first // the line buf begins at
		content  = false // buf holds more than blank lines and comments
		leading  = true  // buf is what precedes the first separator
		lines    = bytes.SplitAfter(data, []byte("\n"))
		flushDoc = func() {
			if leading && !content {
				return
			}
			docs = append(docs, decodeDoc(buf.Bytes(), index, start))
			index++
		}
	)
	for i, l := range lines {
		if len(l) == 0 {
			continue
		}
		n := first + i
		text := strings.TrimSuffix(strings.TrimSuffix(string(l), "\n"), "\r")
		if rest, ok := strings.CutPrefix(text, "---"); ok {
			flushDoc()
			buf.Reset()
			leading, content, start = false, false, n+1
			if rest = strings.TrimSpace(rest); rest != "" && !strings.HasPrefix(rest, "#") {
				errs = append(errs, lineError{n, fmt.Errorf("a document separator followed by %q: kubectl refuses it; put nothing but a comment after ---", rest)})
				buf.WriteString(rest + "\n")
				content, start = true, n
			}
			continue
		}
		buf.WriteString(text + "\n")
		if t := strings.TrimSpace(text); t != "" && !strings.HasPrefix(t, "#") {
			content = true
		}
	}
	flushDoc()
	return docs, errs
}

// decodeDoc decodes one YAML document that begins at line of the file, as
// kubectl decodes it (YAML to JSON), and says in more what that leaves
// unread.
func decodeDoc(text []byte, index, line int) document {
	d := document{index: index, line: line}
	if err := yaml.Unmarshal(text, &d.value); err != nil {
		d.value, d.err = nil, inFile(err, line)
	} else if err := unread(text); err != nil {
		d.more = inFile(err, line)
	}
	return d
}

// yamlLine is how YAML parsers name a line in their errors.
var yamlLine = regexp.MustCompile(`yaml: line (\d+):`)

// inFile turns the lines a YAML parser names in err, counted in a document
// that begins at line of the file, into the file's.
func inFile(err error, line int) error {
	msg := yamlLine.ReplaceAllStringFunc(err.Error(), func(m string) string {
		n, _ := strconv.Atoi(yamlLine.FindStringSubmatch(m)[1])
		return fmt.Sprintf("yaml: line %d:", n+line-1)
	})
	return errors.New(msg)
}

// unread says what a YAML decoder leaves of text after its first document,
// which kubectl drops without a word: a second document after a ... line, or
// a second flow mapping right after the first.
func unread(text []byte) error {
	dec := yamlv3.NewDecoder(bytes.NewReader(text))
	var n yamlv3.Node
	if dec.Decode(&n) != nil {
		return nil
	}
	switch err := dec.Decode(&n); {
	case err == io.EOF:
		return nil
	case err != nil:
		return fmt.Errorf("more than one YAML document with no --- line between them: %w", err)
	}
	return errors.New("more than one YAML document with no --- line between them")
}
