// Package config reads keel's configuration file, in the style of
// nova.conf: the same INI dialect as oslo.config, with Nova's group and
// option names (and defaults) for everything keel implements, and a [keel]
// group for keel's own settings. Command-line flags override the file
// through (*Config).Set, which parses a value exactly as the file would.
//
// The dialect follows oslo.config's parser:
//
//   - "[group]" starts a group. Group names other than DEFAULT are
//     case-insensitive; DEFAULT must be written in capitals ([default] is a
//     different, unknown group, as in oslo.config). Nothing may follow the
//     closing bracket.
//   - "option = value" (or "option: value") sets an option. Option names
//     are case-sensitive. The value is trimmed, and one pair of matching
//     quotes around it is removed.
//   - Lines starting with # or ; are comments. There are no inline
//     comments: "max_attempts = 3  # three" is the value "3  # three",
//     which is not an integer — oslo.config reads it the same way.
//   - oslo.config reads an indented line as the continuation of the
//     previous value; keel needs no multi-line values and rejects indented
//     lines rather than silently read them differently.
//   - Lists are comma-separated, booleans are true/false, yes/no, on/off or
//     1/0 in any case, durations are whole seconds (milliseconds where Nova
//     says so, e.g. [libvirt] live_migration_downtime).
//
// A value that does not parse, or is out of range, is an *Error naming the
// file, line, group and option. An unknown group or option is a Warning,
// not an error, so that a nova.conf can be pointed at keel: options Nova
// has but keel does not use are listed in a table, and their warning says
// so.
//
// Why a small parser of our own rather than an INI library: every value
// keeps the line it came from (Config.Origin), so every error and warning
// can say FILE:LINE — and the common Go INI libraries (gopkg.in/ini.v1
// and the like) do not report the line a value came from. They also
// differ from oslo.config in details that change meaning (inline
// comments, continuation lines, the case of group names), which a parser
// of a hundred lines written after oslo.config's gets right.
package config
