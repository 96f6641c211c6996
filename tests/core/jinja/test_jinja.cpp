// The Jinja engine of core/jinja/ on its own: whitespace control as transformers configures
// jinja2, loops and scoping, macros, namespace(), the filters, tests and methods, Python's
// printing, errors, and the limits that stop a hostile template (depth, loops, output size).
// The expected strings are what Python's jinja2 3.1.6 renders for the same templates; the peer
// test (template_peer.py) checks the real chat templates against jinja2 itself.
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fuzz/fuzz_jinja_one_input.h"
#include "jinja/error.h"
#include "jinja/template.h"
#include "test_support.h"

using kvscope::jinja::Error;
using kvscope::jinja::RenderOptions;
using ojson = nlohmann::ordered_json;

namespace {

std::string render_str(const std::string& src, const ojson& vars = ojson::object(), const RenderOptions& opt = {}) {
  return kvscope::jinja::render(src, vars, opt);
}

// The error message of a template that must fail ("" when it rendered).
std::string error_str(const std::string& src, const ojson& vars = ojson::object(), const RenderOptions& opt = {}) {
  try {
    kvscope::jinja::render(src, vars, opt);
  } catch (const Error& e) { return e.what(); }
  return "";
}

const ojson kChat = ojson::parse(R"({"messages": [
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Hi"},
  {"role": "assistant", "content": "Hello!", "tool_calls": [{"function": {"name": "f", "arguments": {"b": 1, "a": "x"}}}]},
  {"role": "user", "content": "Bye"}], "add_generation_prompt": true})");

}  // namespace

class TestJinja : public QObject {
  Q_OBJECT
 private slots:
  void whitespace_control_data() {
    QTest::addColumn<QString>("src");
    QTest::addColumn<QString>("expected");
    auto row = [](const char* tag, const char* src, const char* out) { QTest::newRow(tag) << src << out; };
    row("trim_blocks eats the newline after a tag", "{% if true %}\nx\n{% endif %}\ny", "x\ny");
    row("lstrip_blocks eats the indent before a tag", "a\n    {% if true %}\n    b\n    {% endif %}\nc", "a\n    b\nc");
    row("lstrip not for expressions", "a\n  {{ 1 }}\n", "a\n  1");
    row("minus strips both sides", "a  \n {%- if true -%}  \n b {%- endif %}", "ab");
    row("minus on expressions", "x {{- 1 -}} y", "x1y");
    row("plus keeps the indent", "a\n  {%+ if true %}b{% endif %}", "a\n  b");
    row("comments are trimmed too", "a\n  {# note #}\nb", "a\nb");
    row("one trailing newline goes", "x\n\n", "x\n");
    row("CRLF becomes LF", "a\r\nb\r\n", "a\nb");
    row("raw", "{% raw %}{{ x }}{% endraw %}", "{{ x }}");
    row("tag at the very start is lstripped", "  {% if true %}x{% endif %}", "x");
  }
  void whitespace_control() {
    QFETCH(QString, src);
    QFETCH(QString, expected);
    QCOMPARE(QString::fromStdString(render_str(src.toStdString())), expected);
  }

  void loops_and_scopes() {
    QCOMPARE(render_str(
                 "{% for m in messages %}{{ loop.index }}{{ m.role[0] }}{% if not loop.last %},{% endif %}{% endfor %}",
                 kChat),
             std::string("1s,2u,3a,4u"));
    QCOMPARE(render_str(
                 "{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
                 "{{ x }}{% endfor %}"),
             std::string("13"));
    QCOMPARE(render_str("{% for x in [] %}a{% else %}empty{% endfor %}"), std::string("empty"));
    QCOMPARE(render_str("{% for x in [1,2,3] if x > 1 %}{{ loop.length }}{{ x }}{% endfor %}"), std::string("2223"));
    QCOMPARE(render_str("{% for x in [1,2,3] %}{{ loop.revindex0 }}{{ loop.cycle('a','b') }}{% endfor %}"),
             std::string("2a1b0a"));
    QCOMPARE(render_str("{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }};{% endfor %}"),
             std::string("a=1;b=2;"));
    // A set inside a loop stays in that iteration; a namespace carries it out.
    QCOMPARE(render_str("{% set y = 1 %}{% for x in [1,2] %}{{ y }}{% set y = 7 %}{{ y }}{% endfor %}{{ y }}"),
             std::string("17171"));
    QCOMPARE(render_str(
                 "{% set ns = namespace(n=0) %}{% for x in [1,2,3] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}"),
             std::string("6"));
    QCOMPARE(render_str("{% if true %}{% set z = 5 %}{% endif %}{{ z }}"), std::string("5"));
    QCOMPARE(render_str("{% for x in none_such %}a{% endfor %}ok"), std::string("ok"));
    QVERIFY(error_str("{% for x in 5 %}{% endfor %}").find("not iterable") != std::string::npos);
  }

  void macros() {
    QCOMPARE(render_str("{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, b=3) }} {{ m(a=5) }}"),
             std::string("1-2 1-3 5-2"));
    QCOMPARE(
        render_str(
            "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}"),
        std::string("120"));
    QCOMPARE(render_str("{% macro m() %}{{ z }}{% endmacro %}{% set z = 3 %}{{ m() }}"), std::string("3"));
    QVERIFY(error_str("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}").find("argument") != std::string::npos);
    QVERIFY(error_str("{% macro m(a) %}{% endmacro %}{{ m(c=2) }}").find("keyword") != std::string::npos);
    QCOMPARE(render_str("{% set x %}in {{ 1 }}{% endset %}[{{ x }}]{% filter upper %}abc{% endfilter %}"),
             std::string("[in 1]ABC"));
  }

  void python_printing() {
    QCOMPARE(render_str(
                 "{{ none }} {{ true }} {{ 1.0 }} {{ 1/3 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 10/2 }} {{ -7//2 }} {{ -7%3 }}"),
             std::string("None True 1.0 0.3333333333333333 1e+20 1.5e-07 5.0 -4 2"));
    QCOMPARE(render_str("{{ [1, 'a', none, true] }} {{ {'a': (1, 2)} }} {{ (1,) }} {{ [\"it's\"] }} {{ ['a\\nb'] }}"),
             std::string("[1, 'a', None, True] {'a': (1, 2)} (1,) [\"it's\"] ['a\\nb']"));
    QCOMPARE(render_str("{{ 'é😀'|length }}{{ 'é😀'[1] }}{{ 'abc'[::-1] }}{{ [1,2,3][-2:] }}"),
             std::string("2😀cba[2, 3]"));
  }

  void filters_data() {
    QTest::addColumn<QString>("src");
    QTest::addColumn<QString>("expected");
    auto row = [](const char* src, const char* out) { QTest::newRow(src) << src << out; };
    row("{{ messages|length }}{{ messages|first|attr('role') }}{{ (messages|last).content }}", "4systemBye");
    row("{{ messages|map(attribute='role')|join(',') }}", "system,user,assistant,user");
    row("{{ messages|selectattr('role', 'equalto', 'user')|list|length }}", "2");
    row("{{ messages|rejectattr('tool_calls', 'defined')|map(attribute='role')|list }}", "['system', 'user', 'user']");
    row("{{ messages[2].tool_calls[0].function.arguments|tojson }}", "{\"b\": 1, \"a\": \"x\"}");
    row("{{ {'b': [1, {}], 'a': 'é'}|tojson(indent=2, sort_keys=true) }}",
        "{\n  \"a\": \"é\",\n  \"b\": [\n    1,\n    {}\n  ]\n}");
    row("{{ '\"\\n'|tojson }}{{ 'é'|tojson(ensure_ascii=true) }}", "\"\\\"\\n\"\"\\u00e9\"");
    row("{{ '  x  '|trim }}|{{ 'a.b'|replace('.', '-') }}|{{ 'Ab'|lower }}{{ 'ab'|upper }}|{{ 'hello world'|title }}",
        "x|a-b|abAB|Hello World");
    row("{{ undefined_name|default('d') }}{{ ''|default('e', true) }}{{ none|default('f') }}", "deNone");
    row("{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'a']|unique|list }}{{ [1, 2, 3]|sum }}{{ [4, 9]|max }}{{ [1,2]|reverse|list }}",
        "[1, 2, 3]['b', 'A']69[2, 1]");
    row("{{ {'b': 1, 'a': 2}|dictsort }}{{ 'x\\ny'|indent(2) }}{{ '3'|int + 1 }}{{ 'x'|int }}{{ 2|float }}",
        "[('a', 2), ('b', 1)]x\n  y402.0");
    row("{{ '%s=%d'|format('a', 3) }}{{ '%.2f' % 1.234 }}{{ 1|string ~ 2 }}{{ '<'|e }}{{ 'a'|safe + '<' }}",
        "a=31.2312&lt;a&lt;");
    row("{{ 'Hello World'.split() }}{{ 'a,b,,c'.split(',', 1) }}{{ ' x '.strip() }}{{ 'xxax'.lstrip('x') }}",
        "['Hello', 'World']['a', 'b,,c']xax");
    row("{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('c') }}{{ 'a{}c{}'.format(1, 'd') }}{{ 'aXa'.replace('a', 'b') }}",
        "TrueTruea1cdbXb");
    row("{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('z', 0) }}{{ {'a': 1}.items()|list }}{{ {'a': 1}.keys()|list }}",
        "10[('a', 1)]['a']");
  }
  void filters() {
    QFETCH(QString, src);
    QFETCH(QString, expected);
    QCOMPARE(QString::fromStdString(render_str(src.toStdString(), kChat)), expected);
  }

  void tests_and_operators() {
    QCOMPARE(
        render_str("{{ x is defined }}{{ messages is defined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}"
                   "{{ [] is sequence }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 1 is integer }}{{ 1.0 is float }}"
                   "{{ 'a' is in 'abc' }}{{ 2 is equalto 2 }}{{ none is not none }}",
                   kChat),
        std::string("FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalse"));
    QCOMPARE(
        render_str(
            "{{ 1 + 2 * 3 ** 2 }}{{ 2 ** 3 ** 2 }}{{ 'ab' * 2 }}{{ [1] + [2] }}{{ 1 == 1.0 }}{{ 'a' ~ 1 ~ none }}"),
        std::string("1964abab[1, 2]Truea1None"));
    QCOMPARE(
        render_str(
            "{{ 'a' if false }}|{{ 'b' if false else 'c' }}|{{ 1 < 2 < 3 }}{{ 'b' not in 'abc' }}{{ not 0 and 1 }}"),
        std::string("|c|TrueFalse1"));
    QCOMPARE(render_str("{{ (messages|selectattr('role', 'equalto', 'nobody')) is defined }}"
                        "{% if messages|selectattr('role', 'equalto', 'nobody') %}generators are true{% endif %}",
                        kChat),
             std::string("Truegenerators are true"));
  }

  void globals() {
    QCOMPARE(render_str("{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ dict(a=1) }}{{ namespace(a=1).a }}"),
             std::string("[0, 1, 2][1, 3, 5]{'a': 1}1"));
    RenderOptions opt;
    std::tm tm{};
    tm.tm_year = 126;
    tm.tm_mon = 0;
    tm.tm_mday = 15;
    tm.tm_wday = 4;
    opt.now = tm;
    QCOMPARE(render_str("{{ strftime_now('%Y-%m-%d %d %b %Y %A') }}", {}, opt),
             std::string("2026-01-15 15 Jan 2026 Thursday"));
    QCOMPARE(error_str("{{ raise_exception('No system messages allowed') }}"),
             std::string("No system messages allowed"));
  }

  void errors() {
    QVERIFY(error_str("{% if true %}x").find("endif") != std::string::npos);
    QVERIFY(error_str("{% frobnicate %}").find("unknown tag") != std::string::npos);
    QVERIFY(error_str("{{ 1 | nosuchfilter }}").find("nosuchfilter") != std::string::npos);
    QVERIFY(error_str("{{ x.y }}").find("'x' is undefined") != std::string::npos);
    QVERIFY(error_str("{{ 1 + 'a' }}").find("unsupported operand") != std::string::npos);
    QVERIFY(error_str("{{ 1 / 0 }}").find("division by zero") != std::string::npos);
    QVERIFY(error_str("{{ [1].append(2) }}").find("unsafe") != std::string::npos);
    QVERIFY(error_str("{{ messages|map(attribute='role')|length }}", kChat).find("len()") != std::string::npos);
    QVERIFY(error_str("{{ x|tojson }}").find("not JSON serializable") != std::string::npos);
    QVERIFY(error_str("{{ 'abc").find("unterminated") != std::string::npos);
    QVERIFY(error_str("{# never closed").find("comment") != std::string::npos);
    QVERIFY(error_str("{{ namespace(_x=1) }}").find("underscore") != std::string::npos);
    // Python's ints grow; kvscope's are 64-bit and say so instead of wrapping.
    QVERIFY(error_str("{{ 9223372036854775807 + 1 }}").find("overflow") != std::string::npos);
    QVERIFY(error_str("{{ 2 ** 64 }}").find("overflow") != std::string::npos);
    QVERIFY(error_str("{{ 1e300|int }}").find("64-bit") != std::string::npos);
    QCOMPARE(render_str("{{ [1,2,3,4,5][::9223372036854775807] }}{{ 'abcdef'[::-9223372036854775807] }}"),
             std::string("[1]f"));
  }

  // A hostile template gets an error, never a crash, a hang or unbounded memory.
  void limits() {
    QVERIFY(error_str("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}").find("recursion") != std::string::npos);
    QVERIFY(error_str("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}").find("nesting") !=
            std::string::npos);
    QVERIFY(error_str("{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}").find("nesting") !=
            std::string::npos);
    std::string nested_ifs;
    for (int i = 0; i < 5000; ++i) nested_ifs += "{% if true %}";
    QVERIFY(!error_str(nested_ifs).empty());
    RenderOptions small;
    small.max_loop_iterations = 100000;
    QVERIFY(error_str("{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", {}, small)
                .find("loop limit") != std::string::npos);
    QVERIFY(error_str("{{ range(10000000)|length }}").find("Range too big") != std::string::npos);
    small = RenderOptions();
    small.max_output_bytes = 1 << 20;
    QVERIFY(error_str("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                      {}, small)
                .find("too large") != std::string::npos);
    QVERIFY(error_str("{{ 'x' * 100000000 }}", {}, small).find("too large") != std::string::npos);
    // Each string stays under the cap, but copying a big one again and again takes a while.
    RenderOptions quick;
    quick.max_seconds = 0.5;
    QVERIFY(error_str("{% set ns = namespace(s='') %}{% for x in range(100000) %}{% for y in range(100) %}"
                      "{% set ns.s = ns.s ~ 'abcdefghijklmnop' %}{% endfor %}{% endfor %}",
                      {}, quick)
                .find("took longer") != std::string::npos);
    QVERIFY(error_str("{% for i in range(100000) %}0123456789abcdef{% endfor %}", {}, small).find("too large") !=
            std::string::npos);
    QVERIFY(error_str("{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
                      {}, small)
                .find("too large") != std::string::npos);
  }

  // The fuzz target's seeds are real templates: through the target's own function they render
  // (so a fuzz run that finds nothing still reaches the interpreter).
  void fuzz_seeds_render() {
    const auto dir = kvscope::test::source_dir() / "tests" / "fuzz" / "jinja_seeds";
    int seeds = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() != ".jinja") continue;
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string src = ss.str();
      QVERIFY2(kvscope::fuzz_jinja::run_one(reinterpret_cast<const uint8_t*>(src.data()), src.size()),
               e.path().filename().c_str());
      ++seeds;
    }
    QVERIFY(seeds >= 3);
  }
};

QTEST_APPLESS_MAIN(TestJinja)
#include "test_jinja.moc"
