// A config section described once, as a table of fields: each entry knows its key, how to read
// and validate it, and how to emit it. The section's valid keys, its reader and its YAML output
// all come from that table, so they cannot drift apart (the tables are in config.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "config/choices.h"
#include "config/yaml_reader.h"

namespace spmd::schema {

// Shortest text that reads back as the same double, with a ".0" so it still looks like a float.
inline std::string format_double(double x) {
  std::string s = fmt::format("{}", x);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

template <class T>
void emit_value(YAML::Emitter& out, const std::string& key, const T& value) {
  out << YAML::Key << key << YAML::Value << value;
}
inline void emit_value(YAML::Emitter& out, const std::string& key, double value) {
  emit_value(out, key, format_double(value));
}

// One key of section S. Reading leaves S's default when the key is absent.
template <class S>
struct Field {
  std::string key;
  std::function<void(const MapReader&, S&)> read;           // reads and validates
  std::function<void(YAML::Emitter&, const S&)> emit;       // may emit nothing

  // This field with one more rule, checked after its own: "expected ..." unless `ok`.
  Field also(std::function<bool(const S&)> ok, std::string expected) const {
    Field f = *this;
    f.read = [read = read, key = key, ok = std::move(ok),
              expected = std::move(expected)](const MapReader& r, S& s) {
      read(r, s);
      r.check(key, ok(s), expected);
    };
    return f;
  }

  // This field, left out of the YAML unless `when` holds (keys most configs never set).
  Field emitted_if(std::function<bool(const S&)> when) const {
    Field f = *this;
    f.emit = [emit = emit, when = std::move(when)](YAML::Emitter& out, const S& s) {
      if (when(s)) emit(out, s);
    };
    return f;
  }
};

// ------------------------------------------------------------------------------ field makers

// Any value the reader can convert, emitted as is.
template <class S, class T>
Field<S> plain(const std::string& key, T S::*member) {
  return {key, [key, member](const MapReader& r, S& s) { r.read(key, s.*member); },
          [key, member](YAML::Emitter& out, const S& s) { emit_value(out, key, s.*member); }};
}

// A value that must satisfy `ok` (a predicate on the value).
template <class S, class T, class Ok>
Field<S> checked(const std::string& key, T S::*member, Ok ok, std::string expected) {
  return plain(key, member).also([member, ok](const S& s) { return ok(s.*member); },
                                 std::move(expected));
}

template <class S>
Field<S> positive(const std::string& key, int64_t S::*member) {
  return checked(key, member, [](int64_t v) { return v > 0; }, "expected a positive integer");
}

template <class S>
Field<S> at_least(const std::string& key, int64_t S::*member, int64_t min) {
  return checked(key, member, [min](int64_t v) { return v >= min; },
                 min == 0 ? "expected a non-negative integer"
                          : fmt::format("expected an integer >= {}", min));
}

template <class S>
Field<S> non_negative(const std::string& key, double S::*member) {
  return checked(key, member, [](double v) { return v >= 0; }, "expected a non-negative number");
}

template <class S>
Field<S> fraction(const std::string& key, double S::*member) {
  return checked(key, member, [](double v) { return v >= 0 && v < 1; },
                 "expected a number in [0, 1)");
}

template <class S>
Field<S> choice(const std::string& key, std::string S::*member, std::vector<std::string> choices) {
  const std::string expected = fmt::format("expected one of {}", fmt::join(choices, ", "));
  return checked(key, member,
                 [choices = std::move(choices)](const std::string& v) {
                   return std::find(choices.begin(), choices.end(), v) != choices.end();
                 },
                 expected);
}

// One of `choices` (listed in messages in this order), spelled in YAML as name_of gives it and
// held as the enum: the one place these names are parsed.
template <class S, class E>
Field<S> enum_choice(const std::string& key, E S::*member, std::vector<E> choices) {
  std::vector<std::string> names;
  for (E value : choices) names.push_back(name_of(value));
  const std::string expected = fmt::format("expected one of {}", fmt::join(names, ", "));
  auto read = [key, member, choices = std::move(choices), expected](const MapReader& r, S& s) {
    if (!r.has(key)) return;
    std::string name;
    r.read(key, name);
    const std::optional<E> value = parse_choice(name, choices);
    r.check(key, value.has_value(), expected);
    s.*member = *value;
  };
  auto emit = [key, member](YAML::Emitter& out, const S& s) { emit_value(out, key, name_of(s.*member)); };
  return {key, read, emit};
}

// ---------------------------------------------------------------------------------- sections

// A named map of the config: its fields in reading, listing and emitting order.
template <class S>
struct Section {
  std::string name;
  std::vector<Field<S>> fields;

  std::vector<std::string> keys() const {
    std::vector<std::string> keys;
    for (const auto& f : fields) keys.push_back(f.key);
    return keys;
  }

  // The section's reader (rejects unknown keys), for messages about its keys.
  MapReader reader(const MapReader& top) const { return top.section(name, keys()); }

  // Reads every field into `out`; returns the reader for the section's cross-field checks.
  MapReader read(const MapReader& top, S& out) const {
    MapReader r = reader(top);
    for (const auto& f : fields) f.read(r, out);
    return r;
  }

  void emit(YAML::Emitter& out, const S& s) const {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
    for (const auto& f : fields) f.emit(out, s);
    out << YAML::EndMap;
  }
};

}  // namespace spmd::schema
