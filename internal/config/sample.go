package config

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// WriteSample writes a sample configuration file: every option, commented
// out, with its help and default. It parses back to Default(), and so does
// its every option line uncommented (but host, whose default is this
// machine's name).
func WriteSample(w io.Writer) error {
	d := Default()
	b := bufio.NewWriter(w)
	b.WriteString(`# keel.conf — sample configuration.
#
# Written by keel's config package (config.WriteSample). Every option keel
# reads is listed below, commented out, with its default. Group and option
# names are Nova's (nova.conf) wherever Nova has the option; [keel] holds
# keel's own settings. Command-line flags override this file.
#
# Syntax is oslo.config's: "[group]" headers, "option = value" lines, and
# comments on lines of their own, starting with # or ; (there are no inline
# comments). Lists are comma-separated; booleans are true/false, yes/no,
# on/off or 1/0; durations are whole seconds unless marked milliseconds.
# Other nova.conf groups and options are accepted with a warning.
`)
	for _, g := range groupOrder {
		fmt.Fprintf(b, "\n[%s]\n", g)
		for _, o := range options {
			if o.group != g {
				continue
			}
			b.WriteString("\n")
			for _, l := range wrap(o.help, 72) {
				b.WriteString("# " + l + "\n")
			}
			b.WriteString("# (" + describe(o) + ")\n")
			for _, a := range o.aliases {
				fmt.Fprintf(b, "# Also accepted as [%s] %s.\n", a.group, a.name)
			}
			if o.sample != "" {
				b.WriteString("# The default shown is a placeholder: it depends on the machine.\n")
			}
			value := o.get(&d)
			switch {
			case o.sample != "":
				value = o.sample
			case o.shown != "":
				value = o.shown
			}
			b.WriteString(strings.TrimRight("#"+o.name+" = "+value, " ") + "\n")
		}
	}
	return b.Flush()
}

// describe says an option's type and bounds: "integer, at least 1".
func describe(o *option) string {
	s := o.typ + " value"
	switch o.typ {
	case "seconds", "milliseconds":
		s = "integer value, in " + o.typ
	case "host:port":
		s = "string value, host:port"
	}
	if len(o.choices) > 0 {
		s += ", one of: " + strings.Join(o.choices, ", ")
	}
	if o.hasMin {
		s += ", at least " + formatNum(o.min)
	}
	return s
}

// wrap breaks text into lines of at most width characters, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
