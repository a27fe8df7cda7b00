-- nakcast.lua: a Wireshark dissector for nakcast datagrams (wire/FORMAT.md,
-- membership and state transfer as gms/msg.go encodes them).
--
-- Install: copy this file into Wireshark's personal plugins folder
-- (~/.local/lib/wireshark/plugins/ on Linux), or load it for one run with
-- `wireshark -X lua_script:nakcast.lua` / `tshark -X lua_script:nakcast.lua`.
--
-- Datagrams on the UDP ports of the "ports" preference (default 45588, the
-- engine's default group port, and 45600, the port of mcastbench's network
-- namespace runs) are always decoded as nakcast; on other ports a heuristic
-- claims a datagram whose header is nakcast's (major version 1, a known
-- type, a consistent header length).
--
-- The decoding is table-driven: `types` maps each type byte to its name, the
-- layout of its fixed part (a list of items) and a decoder for its variable
-- part. A new type is one entry in `types` (and, for a membership type, one
-- in `gms_types`). Every length and count is checked against the datagram;
-- what breaks a rule of FORMAT.md is marked with expert info (group
-- Malformed), and decoding never reads past the datagram.

local nakcast = Proto("nakcast", "nakcast reliable multicast")

local DEFAULT_PORTS = "45588,45600"
local HEADER_LEN = 24
local TRAILER_LEN = 28
local FLAG_REPAIR = 1
local FLAG_AUTH = 2
local FLAG_ENCRYPTED = 4
local FLAG_REPORT = 8
local FLAG_SETTLED = 16
local COUNT_MASK = UInt64(0xffffffff, 0x7fffffff) -- the nonce counter's count: all but bit 63, the path
local MAX_RANGES = 1024
local VERSION_MINOR = 1 -- the minor this dissector knows (wire.VersionMinor); a newer one's extra fields are flagged, not rejected

------------------------------------------------------------------------
-- Fields

local fields = {}
local field_names = {} -- ProtoField -> its name, for expert texts
local function field(pf, name)
	fields[#fields + 1] = pf
	field_names[pf] = name
	return pf
end
local function fu8(abbr, name) return field(ProtoField.uint8("nakcast." .. abbr, name, base.DEC), name) end
local function fu16(abbr, name) return field(ProtoField.uint16("nakcast." .. abbr, name, base.DEC), name) end
local function fu32(abbr, name) return field(ProtoField.uint32("nakcast." .. abbr, name, base.DEC), name) end
local function fu64(abbr, name) return field(ProtoField.uint64("nakcast." .. abbr, name, base.DEC), name) end
local function fbytes(abbr, name) return field(ProtoField.bytes("nakcast." .. abbr, name), name) end
local function fnone(abbr, name) return field(ProtoField.none("nakcast." .. abbr, name), name) end

-- A member (id uint64, incarnation uint32) in one role: a subtree and its
-- two fields, nakcast.<role>.id and nakcast.<role>.inc.
local function fmember(role, name)
	return {
		kind = "member",
		node = fnone(role, name),
		id = field(ProtoField.uint64("nakcast." .. role .. ".id", "Id", base.HEX)),
		inc = fu32(role .. ".inc", "Incarnation"),
		name = name,
	}
end

-- A view id (coordinator member, counter uint64).
local function fviewid(prefix, name)
	return {
		kind = "viewid",
		node = fnone(prefix, name),
		coord = fmember(prefix .. ".coord", "Coordinator"),
		counter = fu64(prefix .. ".counter", "Counter"),
		name = name,
	}
end

-- A range [from, to] of seqnos.
local function frange(prefix, name)
	return {
		kind = "range",
		node = fnone(prefix, name),
		from = fu64(prefix .. ".from", "From"),
		to = fu64(prefix .. ".to", "To"),
		name = name,
	}
end

-- A digest entry (member, low, delivered, received).
local function fentry(prefix)
	return {
		node = fnone(prefix, "Entry"),
		member = fmember(prefix .. ".member", "Member"),
		low = fu64(prefix .. ".low", "Low (purged)"),
		delivered = fu64(prefix .. ".delivered", "Delivered"),
		received = fu64(prefix .. ".received", "Received"),
	}
end

-- Type names, for the type field and the Info column (wire/header.go,
-- gms/msg.go).
local type_names = {
	[1] = "DATA", [2] = "FRAG", [3] = "XMIT_REQ", [4] = "MSG_NOT_FOUND", [5] = "STABLE",
	[6] = "STABILITY", [7] = "HIGHEST", [8] = "HEARTBEAT", [9] = "CHALLENGE", [10] = "ECHO",
	[16] = "DISCOVERY", [17] = "JOIN_REQ", [18] = "JOIN_RSP", [19] = "VIEW", [20] = "VIEW_ACK",
	[21] = "LEAVE", [22] = "GMS_HEARTBEAT", [23] = "PROBE", [24] = "SUSPECT", [25] = "MERGE_REQ",
	[26] = "MERGE_RSP", [27] = "MERGE_DONE", [28] = "CUT_REQ", [29] = "CUT_REPORT", [30] = "CUT",
	[31] = "CUT_ACK", [32] = "STATE_REQ", [33] = "STATE_CHUNK", [34] = "STATE_ACK", [35] = "STATE_DONE",
}
for t = 16, 39 do
	if not type_names[t] then type_names[t] = (t < 32 and "GMS(" or "STATE(") .. t .. ")" end
end

local F = {
	major = fu8("version", "Major version"),
	minor = fu8("minor", "Minor version"),
	type = field(ProtoField.uint8("nakcast.type", "Type", base.DEC, type_names)),
	flags = field(ProtoField.uint8("nakcast.flags", "Flags", base.HEX)),
	repair = field(ProtoField.bool("nakcast.flags.repair", "REPAIR", 8, nil, FLAG_REPAIR)),
	auth = field(ProtoField.bool("nakcast.flags.auth", "AUTH", 8, nil, FLAG_AUTH)),
	encrypted = field(ProtoField.bool("nakcast.flags.encrypted", "ENCRYPTED", 8, nil, FLAG_ENCRYPTED)),
	report = field(ProtoField.bool("nakcast.flags.report", "REPORT", 8, nil, FLAG_REPORT)),
	settled = field(ProtoField.bool("nakcast.flags.settled", "SETTLED", 8, nil, FLAG_SETTLED)),
	group = field(ProtoField.uint32("nakcast.group", "Group id", base.HEX)),
	sender = fmember("sender", "Sender"),
	keyid = fu16("keyid", "Key id"),
	hlen = fu16("hlen", "Header length"),
	extension = fbytes("extension", "Fixed-part bytes of a newer minor"),
	body = fbytes("body", "Body"),
	trailer = fnone("trailer", "Authentication trailer"),
	nonce = fbytes("trailer.nonce", "Nonce"),
	salt = field(ProtoField.uint32("nakcast.trailer.salt", "Salt", base.HEX), "Salt"),
	counter = fu64("trailer.counter", "Counter"),
	nonce_path = field(ProtoField.uint8("nakcast.trailer.path", "Path", base.DEC, { [0] = "group", [1] = "unicast" }, 0x80), "Path"),
	nonce_count = fu64("trailer.count", "Count"),
	tag = fbytes("trailer.tag", "Tag"),
	ciphertext = fbytes("ciphertext", "Encrypted body"),

	first = fu64("data.first", "First seqno"),
	origin = fmember("origin", "Origin"),
	count = fu32("data.count", "Message count"),
	msg = fnone("msg", "Message"),
	msg_seq = fu64("msg.seq", "Seqno"),
	msg_len = fu16("msg.len", "Length"),
	msg_data = fbytes("msg.data", "Payload"),

	frag_seq = fu64("frag.seq", "Seqno"),
	frag_index = fu32("frag.index", "Fragment index"),
	frag_count = fu32("frag.count", "Fragment count"),
	frag_total = fu32("frag.total", "Message length"),
	frag_len = fu32("frag.len", "Payload length"),
	frag_first = fu64("frag.first", "Message's first seqno"),
	frag_last = fu64("frag.last", "Message's last seqno"),
	frag_data = fbytes("frag.data", "Payload"),

	view = fviewid("view", "View id"),
	target = fmember("target", "Target"),
	delivered = fu64("xmit.delivered", "Requester's delivered"),
	range_count = fu32("xmit.count", "Range count"),
	range = frange("range", "Range"),

	chal_nonce = fu64("challenge.nonce", "Nonce"),
	chal_kind = field(ProtoField.uint32("nakcast.challenge.kind", "Kind", base.DEC, { [1] = "ADDRESS", [2] = "NOT_FOUND" })),
	chal_count = fu32("challenge.count", "Range count"),

	requester = fmember("requester", "Requester"),
	missing = frange("missing", "Missing"),
	low = fu64("low", "Low (purge point)"),
	highest = fu64("highest", "Highest seqno sent"),
	entry_count = fu32("digest.count", "Entry count"),
	entry = fentry("entry"),

	gms_kind = fu8("gms.kind", "Kind"),
	gms_secs = field(ProtoField.uint8("nakcast.gms.sections", "Sections", base.HEX)),
	gms_reserved = fu16("gms.reserved", "Reserved"),
	gms_id = fu64("gms.id", "Id"),
	gms_a = fu64("gms.a", "A"),
	gms_b = fu64("gms.b", "B"),
	gms_c = fu64("gms.c", "C"),
	gms_member = fmember("gms.member", "Member"),
	gms_addr = field(ProtoField.string("nakcast.gms.addr", "Address")),
	gms_peer = fnone("gms.peer", "Peer"),
	gms_peer_member = fmember("gms.peer.member", "Member"),
	gms_peer_addr = field(ProtoField.string("nakcast.gms.peer.addr", "Address")),
	gms_view = fviewid("gms.view", "View"),
	gms_view_count = fu16("gms.view.count", "Member count"),
	gms_count = fu16("gms.count", "Count"),
	gms_entry = fentry("gms.entry"),
	gms_range = frange("gms.range", "Range"),
	gms_members = fmember("gms.members", "Member"),
	gms_data_len = fu32("gms.data.len", "Data length"),
	gms_data = fbytes("gms.data", "Data"),
}

-- The section bits of a membership body, in wire order.
local gms_sections = {
	{ bit = 1, name = "addr" }, { bit = 2, name = "peer" }, { bit = 4, name = "view" },
	{ bit = 8, name = "digest" }, { bit = 16, name = "ranges" }, { bit = 32, name = "members" },
	{ bit = 64, name = "data" },
}
for _, s in ipairs(gms_sections) do
	s.field = field(ProtoField.bool("nakcast.gms.sections." .. s.name, s.name, 8, nil, s.bit))
end

local E = {
	malformed = ProtoExpert.new("nakcast.malformed", "Malformed nakcast datagram",
		expert.group.MALFORMED, expert.severity.ERROR),
	truncated = ProtoExpert.new("nakcast.truncated", "Truncated nakcast datagram",
		expert.group.MALFORMED, expert.severity.ERROR),
	capture = ProtoExpert.new("nakcast.capture_truncated", "Capture shorter than the datagram",
		expert.group.UNDECODED, expert.severity.NOTE),
	unknown = ProtoExpert.new("nakcast.unknown_type", "Unknown message type",
		expert.group.UNDECODED, expert.severity.WARN),
	newer = ProtoExpert.new("nakcast.newer_minor", "Fields of a newer minor version",
		expert.group.PROTOCOL, expert.severity.NOTE),
	error = ProtoExpert.new("nakcast.dissector_error", "Dissector error",
		expert.group.MALFORMED, expert.severity.ERROR),
}
nakcast.experts = { E.malformed, E.truncated, E.capture, E.unknown, E.newer, E.error }

------------------------------------------------------------------------
-- Decoding state: a cursor over the datagram that refuses to read past its
-- end (the datagram's, or the capture's when the capture is shorter).

local Dec = {}
Dec.__index = Dec

local function new_dec(tvb, pinfo)
	return setmetatable({
		tvb = tvb, pinfo = pinfo,
		len = tvb:reported_len(), -- the datagram's length
		cap = tvb:len(),          -- what the capture holds of it
		off = 0, lim = tvb:reported_len(),
		ctx = {}, stopped = false, bad = false,
	}, Dec)
end

function Dec:flag(item, ex, text)
	item:add_proto_expert_info(ex, text)
	if ex == E.malformed or ex == E.truncated or ex == E.error then
		self.bad = true
	elseif ex == E.capture then
		self.short = true
	end
end

function Dec:malformed(item, text) self:flag(item, E.malformed, text) end

-- need reports whether n bytes can be read at the cursor; if not it flags
-- why (the datagram ends: truncated; the capture ends: a note) and stops.
function Dec:need(n, tree, what)
	if self.stopped then return false end
	if self.off + n > self.lim then
		self:flag(tree, E.truncated, string.format("%s: needs %d bytes at offset %d, the %s ends at %d",
			what, n, self.off, self.lim < self.len and "body" or "datagram", self.lim))
		self.stopped = true
		return false
	end
	if self.off + n > self.cap then
		self:flag(tree, E.capture, string.format("%s at offset %d: the capture holds %d of %d bytes",
			what, self.off, self.cap, self.len))
		self.stopped = true
		return false
	end
	return true
end

function Dec:range(n) return self.tvb(self.off, n) end

local function u64_zero(v) return v == UInt64(0) end

local function member_string(id, inc)
	local hex = id:tohex():gsub("^0+(.)", "%1")
	return hex .. "." .. tostring(inc)
end

-- Adders for the composite encodings; each takes the tvb range and returns
-- the decoded value and the tree item.
local function add_member(tree, f, r)
	local id, inc = r(0, 8):le_uint64(), r(8, 4):le_uint()
	local s = member_string(id, inc)
	local t = tree:add(f.node, r)
	t:set_text(f.name .. ": " .. s)
	t:add_le(f.id, r(0, 8))
	t:add_le(f.inc, r(8, 4))
	return { id = id, inc = inc, str = s, zero = u64_zero(id) and inc == 0 }, t
end

local function add_viewid(tree, f, r)
	local t = tree:add(f.node, r)
	local coord = add_member(t, f.coord, r(0, 12))
	local counter = r(12, 8):le_uint64()
	t:add_le(f.counter, r(12, 8))
	local s = coord.str .. "#" .. tostring(counter)
	t:set_text(f.name .. ": " .. s)
	return { coord = coord, counter = counter, str = s }, t
end

local function add_range(tree, f, r)
	local from, to = r(0, 8):le_uint64(), r(8, 8):le_uint64()
	local t = tree:add(f.node, r)
	t:add_le(f.from, r(0, 8))
	t:add_le(f.to, r(8, 8))
	t:set_text(string.format("%s: [%s, %s]", f.name, tostring(from), tostring(to)))
	return { from = from, to = to, str = tostring(from) .. "-" .. tostring(to) }, t
end

local function range_check(v)
	if u64_zero(v.from) or v.to < v.from then return "invalid range (want 1 <= from <= to)" end
end

-- gms.MaxViewCounter: a membership datagram naming a higher view counter
-- is malformed.
local GMS_MAX_COUNTER = UInt64(0, 0x40000000) -- 2^62
local function gms_counter_check(v)
	if v.counter > GMS_MAX_COUNTER then return "view counter above 2^62" end
end

local function member_check(v)
	if v.zero then return "zero member" end
end

local sizes = { u8 = 1, u16 = 2, u32 = 4, u64 = 8, member = 12, viewid = 20, range = 16 }

-- Fixed-part items. `key` stores the value in dec.ctx for the variable part
-- and the Info column; `check` returns why a value breaks FORMAT.md.
local function item(kind, f, key, check) return { kind = kind, f = f, key = key, check = check } end

function Dec:item(tree, it)
	local n = sizes[it.kind]
	local what = type(it.f) == "table" and it.f.name or field_names[it.f] or "field"
	if not self:need(n, tree, what) then return nil end
	local r = self:range(n)
	local v, ti
	if it.kind == "member" then
		v, ti = add_member(tree, it.f, r)
	elseif it.kind == "viewid" then
		v, ti = add_viewid(tree, it.f, r)
	elseif it.kind == "range" then
		v, ti = add_range(tree, it.f, r)
	elseif it.kind == "u64" then
		v, ti = r:le_uint64(), tree:add_le(it.f, r)
	else
		v, ti = r:le_uint(), tree:add_le(it.f, r)
	end
	self.off = self.off + n
	if it.key then self.ctx[it.key] = v end
	if it.check then
		local why = it.check(v, self.ctx)
		if why then self:malformed(ti, why) end
	end
	return v, ti
end

-- Digest entries: n of them, each a member, low, delivered, received. The
-- wire's digests refuse a zero member (FORMAT.md), membership digests a
-- member listed twice (gms/msg.go): rule is "nonzero" or "unique".
function Dec:entries(tree, f, n, rule)
	local seen = {}
	for i = 1, n do
		if not self:need(36, tree, "digest entry " .. i) then return end
		local r = self:range(36)
		local t = tree:add(f.node, r)
		local m, mt = add_member(t, f.member, r(0, 12))
		t:add_le(f.low, r(12, 8))
		t:add_le(f.delivered, r(20, 8))
		t:add_le(f.received, r(28, 8))
		t:set_text(string.format("Entry %s: low %s, delivered %s, received %s", m.str,
			tostring(r(12, 8):le_uint64()), tostring(r(20, 8):le_uint64()), tostring(r(28, 8):le_uint64())))
		if rule == "nonzero" and m.zero then self:malformed(mt, "zero member in a digest") end
		if rule == "unique" and seen[m.str] then self:malformed(mt, "member listed twice in a digest") end
		seen[m.str] = true
		self.off = self.off + 36
	end
end

------------------------------------------------------------------------
-- Variable parts

-- DATA: count messages, each a uint16 length and its bytes.
local function var_messages(d, tree)
	local first, count = d.ctx.first, d.ctx.count
	if not first or not count then return end
	for i = 0, count - 1 do
		if not d:need(2, tree, "length of message " .. (i + 1)) then return end
		local n = d:range(2):le_uint()
		local start = d.off
		local seq = first + UInt64(i)
		local ok = d.off + 2 + n <= d.lim and d.off + 2 + n <= d.cap
		local t = tree:add(F.msg, d.tvb(start, ok and 2 + n or 2))
		t:set_text(string.format("Message seq %s, %d bytes", tostring(seq), n))
		t:add(F.msg_seq, d:range(2), seq):set_generated()
		t:add_le(F.msg_len, d:range(2))
		d.off = d.off + 2
		if not d:need(n, t, "message " .. tostring(seq)) then return end
		if n > 0 then t:add(F.msg_data, d:range(n)) end
		d.off = d.off + n
	end
end

-- FRAG: the payload, whose length the fixed part gives.
local function var_payload(d, tree)
	local n = d.ctx.plen
	if not n then return end
	if not d:need(n, tree, "fragment payload") then return end
	if n > 0 then tree:add(F.frag_data, d:range(n)) end
	d.off = d.off + n
	local f = d.ctx
	if f.seq and f.index and f.count then
		local firstseq = f.seq - UInt64(f.index)
		local seqr = d.tvb(HEADER_LEN, 8)
		tree:add(F.frag_first, seqr, firstseq):set_generated()
		tree:add(F.frag_last, seqr, firstseq + UInt64(f.count) - UInt64(1)):set_generated()
	end
end

-- XMIT_REQ: n ranges.
local function var_ranges(d, tree)
	local n = d.ctx.nranges
	if not n or n > MAX_RANGES then return end
	local list = {}
	for i = 1, n do
		local v = d:item(tree, item("range", F.range, nil, range_check))
		if not v then return end
		if i <= 4 then list[#list + 1] = v.str end
	end
	if n > 4 then list[#list + 1] = "..." end
	d.ctx.ranges = table.concat(list, ",")
end

-- MSG_NOT_FOUND, STABLE, STABILITY: n digest entries.
local function var_entries(d, tree)
	local n = d.ctx.nentries
	if n then d:entries(tree, F.entry, n, "nonzero") end
end

------------------------------------------------------------------------
-- Membership and state transfer (gms/msg.go): one layout for every type.

local gms_types = {
	[16] = { kinds = { [0] = "request", [1] = "answer" },
		a = "creates the group if alone (1)", b = "discovery timeout (ns)" },
	[17] = { a = "first incarnation of this join" },
	[18] = { kinds = { [0] = "view and digest", [1] = "redirect" }, member = "joiner" },
	[19] = { kinds = { [0] = "install", [1] = "merge view", [2] = "exclusion notice" },
		id = "merge id", member = "excluded member" },
	[20] = { kinds = { [0] = "ack", [1] = "counter hint" }, a = "acker's view counter" },
	[21] = { kinds = { [0] = "leave", [1] = "leave done" }, a = "highest seqno sent", b = "purge point" },
	[22] = { },
	[23] = { kinds = { [0] = "probe", [1] = "answer" }, id = "nonce" },
	[24] = { },
	[25] = { id = "merge id" },
	[26] = { kinds = { [0] = "view and digest", [1] = "refused" }, id = "merge id" },
	[27] = { kinds = { [0] = "committed", [1] = "cancelled" }, id = "merge id" },
	[28] = { member = "departed sender" },
	[29] = { member = "departed sender", a = "delivered", b = "received",
		c = "window: 1 held, 2 closed after a cut (a, b: where)" },
	[30] = { kinds = { [0] = "cut fixed", [1] = "close the window" },
		id = "fix number", member = "departed sender", a = "cut seqno", b = "stable point" },
	[31] = { id = "fix number", member = "departed sender" },
	[32] = { id = "transfer id" },
	[33] = { id = "transfer id", a = "offset", b = "total length" },
	[34] = { id = "transfer id", a = "bytes received in order" },
	[35] = { kinds = { [0] = "installed", [1] = "aborted" }, id = "transfer id" },
}

local GMS_FIXED = 68
local GMS_MAX_ADDR = 1024
local GMS_MAX_COUNT = 8192
local GMS_MAX_DATA = 1048576

local function label(ti, text)
	if text and ti then ti:append_text(" (" .. text .. ")") end
end

local function gms_fixed(d, tree)
	local g = gms_types[d.ctx.type] or {}
	local kind, kt = d:item(tree, item("u8", F.gms_kind, "kind"))
	if kind and g.kinds then
		d.ctx.kind_name = g.kinds[kind]
		label(kt, g.kinds[kind] or "unknown kind")
	end
	local _, st = d:item(tree, item("u8", F.gms_secs, "secs"))
	if st then
		for _, s in ipairs(gms_sections) do st:add(s.field, d.tvb(d.off - 1, 1)) end
	end
	d:item(tree, item("u16", F.gms_reserved))
	d:item(tree, item("viewid", F.view, "view", gms_counter_check))
	local _, ti = d:item(tree, item("u64", F.gms_id, "id"))
	label(ti, g.id)
	_, ti = d:item(tree, item("u64", F.gms_a, "a"))
	label(ti, g.a)
	_, ti = d:item(tree, item("u64", F.gms_b, "b"))
	label(ti, g.b)
	_, ti = d:item(tree, item("u64", F.gms_c, "c"))
	label(ti, g.c)
	_, ti = d:item(tree, item("member", F.gms_member, "member"))
	label(ti, g.member)
	if d.ctx.kind_name then tree:append_text(", " .. d.ctx.kind_name) end
end

function Dec:gms_string(tree, f, what)
	if not self:need(2, tree, what .. " length") then return nil end
	local n = self:range(2):le_uint()
	if n > GMS_MAX_ADDR then
		self:malformed(tree, string.format("%s of %d bytes (at most %d)", what, n, GMS_MAX_ADDR))
		self.stopped = true
		return nil
	end
	if not self:need(2 + n, tree, what) then return nil end
	local s = self.tvb(self.off + 2, n):string()
	tree:add(f, self:range(2 + n), s)
	self.off = self.off + 2 + n
	return s
end

function Dec:gms_peer(tree, fm, fa)
	local m = self:item(tree, item("member", fm))
	if not m then return end
	self:gms_string(tree, fa, "address")
end

function Dec:gms_count(tree, f, what)
	local n = self:item(tree, item("u16", f))
	if n and n > GMS_MAX_COUNT then
		self:malformed(tree, string.format("%s count %d (at most %d)", what, n, GMS_MAX_COUNT))
		self.stopped = true
		return nil
	end
	return n
end

local gms_section_decoders = {
	addr = function(d, t)
		d.ctx.addr = d:gms_string(t, F.gms_addr, "address")
	end,
	peer = function(d, t)
		local p = t:add(F.gms_peer, d.tvb(d.off, 0))
		d:gms_peer(p, F.gms_peer_member, F.gms_peer_addr)
	end,
	view = function(d, t)
		local v = d:item(t, item("viewid", F.gms_view, nil, gms_counter_check))
		if not v then return end
		local n = d:gms_count(t, F.gms_view_count, "view member")
		for _ = 1, n or 0 do
			if d.stopped then return end
			d:gms_peer(t, F.gms_peer_member, F.gms_peer_addr)
		end
	end,
	digest = function(d, t)
		local n = d:gms_count(t, F.gms_count, "digest entry")
		if n then d:entries(t, F.gms_entry, n, "unique") end
	end,
	ranges = function(d, t)
		local n = d:gms_count(t, F.gms_count, "range")
		for _ = 1, n or 0 do
			if not d:item(t, item("range", F.gms_range, nil, range_check)) then return end
		end
	end,
	members = function(d, t)
		local n = d:gms_count(t, F.gms_count, "member")
		for _ = 1, n or 0 do
			if not d:item(t, item("member", F.gms_members)) then return end
		end
	end,
	data = function(d, t)
		local n = d:item(t, item("u32", F.gms_data_len))
		if not n then return end
		if n > GMS_MAX_DATA then
			d:malformed(t, string.format("data of %d bytes (at most %d)", n, GMS_MAX_DATA))
			d.stopped = true
			return
		end
		if not d:need(n, t, "data") then return end
		if n > 0 then t:add(F.gms_data, d:range(n)) end
		d.off = d.off + n
	end,
}

local function var_gms(d, tree)
	local secs = d.ctx.secs
	if not secs then return end
	if secs >= 128 and d.ctx.minor <= VERSION_MINOR then
		d:malformed(tree, string.format("unknown section bits 0x%02x in a 1.%d datagram", secs, d.ctx.minor))
	end
	for _, s in ipairs(gms_sections) do
		if math.floor(secs / s.bit) % 2 == 1 then
			local t = tree:add(nakcast, d.tvb(d.off, 0), "Section " .. s.name)
			local start = d.off
			gms_section_decoders[s.name](d, t)
			if d.off > start and d.off <= d.cap then t:set_len(d.off - start) end
			if d.stopped then return end
		end
	end
end

local function gms_info(c)
	local g = gms_types[c.type] or {}
	local parts = {}
	if c.kind_name then parts[#parts + 1] = c.kind_name end
	if c.view and not c.view.coord.zero then parts[#parts + 1] = "view " .. c.view.str end
	if g.id and c.id and not u64_zero(c.id) then parts[#parts + 1] = g.id .. " " .. tostring(c.id) end
	if g.member and c.member and not c.member.zero then parts[#parts + 1] = g.member .. " " .. c.member.str end
	if #parts == 0 then return "" end
	return " " .. table.concat(parts, ", ")
end

------------------------------------------------------------------------
-- The type table.

local function nonzero(name)
	return function(v) if u64_zero(v) then return name .. " must be at least 1" end end
end

local function origin_info(c)
	if c.origin and c.sender and c.origin.str ~= c.sender.str then return " origin " .. c.origin.str end
	return ""
end

local types = {
	[1] = {
		fixed = { item("u64", F.first, "first", nonzero("first seqno")), item("member", F.origin, "origin", member_check),
			item("u32", F.count, "count", function(v, c)
				if v < 1 then return "count must be at least 1" end
				if c.first and c.first + UInt64(v) - UInt64(1) < c.first then return "run passes 2^64-1" end
			end) },
		var = var_messages,
		info = function(c)
			if not (c.first and c.count and c.count > 0) then return "" end
			return string.format(" seq %s-%s (%d msgs)%s", tostring(c.first),
				tostring(c.first + UInt64(c.count) - UInt64(1)), c.count, origin_info(c))
		end },
	[2] = {
		fixed = { item("u64", F.frag_seq, "seq"), item("member", F.origin, "origin", member_check),
			item("u32", F.frag_index, "index"),
			item("u32", F.frag_count, "count", function(v, c)
				if v < 1 then return "fragment count must be at least 1" end
				if c.index and c.index >= v then return "index must be below count" end
				if not (c.seq and c.index) then return end
				if c.seq <= UInt64(c.index) then return "seqno must exceed the index" end
				local first = c.seq - UInt64(c.index)
				if first + UInt64(v) - UInt64(1) < first then return "the message's seqnos pass 2^64-1" end
			end),
			item("u32", F.frag_total, "total"),
			item("u32", F.frag_len, "plen", function(v, c)
				if c.total and v > c.total then return "payload longer than the message" end
			end) },
		var = var_payload,
		info = function(c)
			if not (c.seq and c.index and c.count) then return "" end
			return string.format(" seq %s index %d of %d%s", tostring(c.seq), c.index, c.count, origin_info(c))
		end },
	[3] = {
		fixed = { item("viewid", F.view, "view"), item("member", F.target, "target", member_check),
			item("u64", F.delivered, "delivered"),
			item("u32", F.range_count, "nranges", function(v)
				if v < 1 then return "at least one range" end
				if v > MAX_RANGES then return "more than 1024 ranges" end
			end) },
		var = var_ranges,
		info = function(c)
			return string.format(" target %s ranges %s", c.target and c.target.str or "?", c.ranges or "?")
		end },
	[4] = {
		fixed = { item("viewid", F.view, "view"), item("member", F.requester, "requester", member_check),
			item("range", F.missing, "missing", range_check), item("u64", F.low, "low"),
			item("u64", F.highest, "highest", function(v, c)
				if c.low and c.low > v then return "low above highest sent" end
			end),
			item("u32", F.entry_count, "nentries") },
		var = var_entries,
		info = function(c)
			return string.format(" to %s missing %s low %s highest %s", c.requester and c.requester.str or "?",
				c.missing and c.missing.str or "?", tostring(c.low or "?"), tostring(c.highest or "?"))
		end },
	[5] = {
		fixed = { item("viewid", F.view, "view"), item("u32", F.entry_count, "nentries") },
		var = var_entries },
	[6] = {
		fixed = { item("viewid", F.view, "view"), item("u32", F.entry_count, "nentries") },
		var = var_entries },
	[7] = {
		fixed = { item("viewid", F.view, "view"), item("u64", F.low, "low"),
			item("u64", F.highest, "highest", function(v, c)
				if c.low and c.low > v then return "low above highest" end
			end) },
		info = function(c)
			return string.format(" low %s highest %s", tostring(c.low or "?"), tostring(c.highest or "?"))
		end },
	[8] = { fixed = { item("viewid", F.view, "view") },
		info = function(c) return " view " .. (c.view and c.view.str or "?") end },
}

-- CHALLENGE and ECHO (1.1) share one layout.
for t = 9, 10 do
	types[t] = {
		fixed = { item("viewid", F.view, "view"), item("member", F.target, "target", member_check),
			item("u64", F.chal_nonce, "nonce"),
			item("u32", F.chal_kind, "kind", function(v) if v < 1 then return "kind 0" end end),
			item("u32", F.chal_count, "nranges", function(v)
				if v > MAX_RANGES then return "more than 1024 ranges" end
			end) },
		var = var_ranges,
		info = function(c)
			local kinds = { [1] = "ADDRESS", [2] = "NOT_FOUND" }
			return string.format(" %s target %s%s", kinds[c.kind] or tostring(c.kind or "?"),
				c.target and c.target.str or "?", c.ranges and c.ranges ~= "" and " ranges " .. c.ranges or "")
		end }
end

local function digest_info(c)
	return string.format(" view %s, %d entries", c.view and c.view.str or "?", c.nentries or 0)
end
types[5].info, types[6].info = digest_info, digest_info

-- Membership and state-transfer types share one layout.
for t = 16, 39 do
	types[t] = { gms = true, fixed_len = GMS_FIXED, var = var_gms, info = gms_info }
end

for t, spec in pairs(types) do
	spec.name = type_names[t]
	if not spec.fixed_len then
		local n = 0
		for _, it in ipairs(spec.fixed or {}) do n = n + sizes[it.kind] end
		spec.fixed_len = n
	end
end

------------------------------------------------------------------------
-- Header, trailer and the whole datagram.

local function has_flag(flags, bit) return math.floor(flags / bit) % 2 == 1 end

local function add_header(d, tree)
	local tvb = d.tvb
	local t = tree:add(nakcast, tvb(0, HEADER_LEN), "Common header")
	t:add(F.major, tvb(0, 1))
	d.ctx.minor = tvb(1, 1):uint()
	t:add(F.minor, tvb(1, 1))
	local typ = tvb(2, 1):uint()
	d.ctx.type = typ
	local tt = t:add(F.type, tvb(2, 1))
	local flags = tvb(3, 1):uint()
	local ft = t:add(F.flags, tvb(3, 1))
	ft:add(F.repair, tvb(3, 1))
	ft:add(F.auth, tvb(3, 1))
	ft:add(F.encrypted, tvb(3, 1))
	ft:add(F.report, tvb(3, 1))
	if typ == 6 then
		ft:add(F.settled, tvb(3, 1)) -- a STABILITY-only bit (reserved on the other types)
	end
	t:add_le(F.group, tvb(4, 4))
	local sender, st = add_member(t, F.sender, tvb(8, 12))
	d.ctx.sender = sender
	if sender.zero then d:malformed(st, "zero sender") end
	local keyid = tvb(20, 2):le_uint()
	local kt = t:add_le(F.keyid, tvb(20, 2))
	local auth = has_flag(flags, FLAG_AUTH)
	if auth ~= (keyid ~= 0) then
		d:malformed(kt, auth and "AUTH set with key id 0" or "key id without AUTH")
	end
	local hlen = tvb(22, 2):le_uint()
	local ht = t:add_le(F.hlen, tvb(22, 2))
	return typ, flags, auth, hlen, tt, ht
end

local function add_trailer(d, tree)
	local tvb, off = d.tvb, d.len - TRAILER_LEN
	if d.len < HEADER_LEN + TRAILER_LEN then
		d:flag(tree, E.truncated, "AUTH set but no room for the 28-byte trailer")
		return false
	end
	if d.len > d.cap then
		d:flag(tree, E.capture, "the capture ends before the authentication trailer")
		return true
	end
	local t = tree:add(F.trailer, tvb(off, TRAILER_LEN))
	local n = t:add(F.nonce, tvb(off, 12))
	n:add_le(F.salt, tvb(off, 4))
	local c = n:add_le(F.counter, tvb(off + 4, 8))
	c:add(F.nonce_path, tvb(off + 11, 1)) -- bit 63: the top bit of the counter's last byte
	c:add(F.nonce_count, tvb(off + 4, 8), tvb(off + 4, 8):le_uint64():band(COUNT_MASK)):set_generated()
	t:add(F.tag, tvb(off + 12, 16))
	return true
end

-- dissect_body decodes the type's fixed and variable parts.
local function dissect_body(d, root, spec, name, hlen)
	local tvb = d.tvb
	local body = root:add(nakcast, tvb(HEADER_LEN, 0), name)
	if spec.gms then gms_fixed(d, body) end
	for _, it in ipairs(spec.fixed or {}) do
		if not d:item(body, it) then break end
	end
	if not d.stopped and hlen > d.off then
		if d:need(hlen - d.off, body, "fixed part") then
			d:flag(body:add(F.extension, d:range(hlen - d.off)), E.newer,
				string.format("%d bytes after the 1.0 fixed part", hlen - d.off))
			d.off = hlen
		end
	end
	if not d.stopped and spec.var then spec.var(d, body) end
	if not d.stopped and d.off < d.lim then
		local n = d.lim - d.off
		local extra = body:add(F.body, tvb(d.off, math.min(n, math.max(0, d.cap - d.off))))
		if spec.gms and d.ctx.minor > VERSION_MINOR then
			d:flag(extra, E.newer, string.format("%d bytes after the last section", n))
		else
			d:malformed(extra, string.format("%d bytes left over after the last field", n))
		end
	end
	local stop = math.min(d.off, d.cap)
	if stop > HEADER_LEN then body:set_len(stop - HEADER_LEN) end
	if spec.info then body:set_text(name .. spec.info(d.ctx)) end
end

-- dissect_encrypted shows an encrypted body: only the common header is in
-- the clear (FORMAT.md, "Authentication trailer").
local function dissect_encrypted(d, root, hlen)
	if hlen > d.lim then
		d:flag(root, E.truncated, string.format("header length %d past the body's end %d", hlen, d.lim))
	end
	local n = math.min(d.lim, d.cap) - HEADER_LEN
	if n > 0 then
		root:add(F.ciphertext, d.tvb(HEADER_LEN, n)):append_text(
			string.format(" (%d bytes, AES-GCM: fixed part and variable part)", d.lim - HEADER_LEN))
	end
end

-- dissect decodes one datagram (the whole tvb) under tree; it assumes the
-- first byte is present.
local function dissect(tvb, pinfo, root)
	local d = new_dec(tvb, pinfo)
	if tvb(0, 1):uint() ~= 1 or d.len < HEADER_LEN or d.cap < HEADER_LEN then
		root:add(F.major, tvb(0, 1))
	end
	if tvb(0, 1):uint() ~= 1 then
		d:malformed(root, string.format("major version %d (this dissector reads 1)", tvb(0, 1):uint()))
		pinfo.cols.info = "nakcast [unsupported major version]"
		return d
	end
	if d.len < HEADER_LEN or d.cap < HEADER_LEN then
		if d.len < HEADER_LEN then
			d:flag(root, E.truncated, string.format("%d bytes, shorter than the 24-byte header", d.len))
		else
			d:flag(root, E.capture, "the capture ends inside the header")
		end
		pinfo.cols.info = "nakcast [truncated]"
		return d
	end
	local typ, flags, auth, hlen, tt, ht = add_header(d, root)
	local encrypted = auth and has_flag(flags, FLAG_ENCRYPTED)
	local spec = types[typ]
	local name = spec and spec.name or string.format("TYPE(%d)", typ)
	root:append_text(", " .. name .. ", sender " .. d.ctx.sender.str)
	if auth and not add_trailer(d, root) then spec = nil end
	d.lim = auth and math.max(HEADER_LEN, d.len - TRAILER_LEN) or d.len
	d.off = HEADER_LEN
	if not types[typ] then
		d:flag(tt, E.unknown, string.format("type %d is not defined in version 1.%d", typ, d.ctx.minor))
	end
	if spec and hlen < HEADER_LEN + spec.fixed_len then
		d:malformed(ht, string.format("header length %d below %d, the 1.0 size of %s",
			hlen, HEADER_LEN + spec.fixed_len, name))
		spec = nil
	end
	if spec and encrypted then
		dissect_encrypted(d, root, hlen)
	elseif spec then
		dissect_body(d, root, spec, name, hlen)
	elseif d.lim > HEADER_LEN and d.cap > HEADER_LEN then
		root:add(F.body, tvb(HEADER_LEN, math.min(d.lim, d.cap) - HEADER_LEN))
	end
	local info = name .. " " .. d.ctx.sender.str
	if spec and spec.info and not encrypted then info = info .. spec.info(d.ctx) end
	if has_flag(flags, FLAG_REPAIR) then info = info .. " [REPAIR]" end
	if typ == 6 and has_flag(flags, FLAG_REPORT) then info = info .. " [REPORT]" end
	if typ == 6 and has_flag(flags, FLAG_SETTLED) then info = info .. " [SETTLED]" end
	if auth then info = info .. (encrypted and " [AUTH, ENCRYPTED]" or " [AUTH]") end
	pinfo.cols.info = info
	return d
end

local function safe_dissect(tvb, pinfo, tree)
	pinfo.cols.protocol = "NAKCAST"
	local root = tree:add(nakcast, tvb())
	local ok, d = pcall(dissect, tvb, pinfo, root)
	if not ok then
		root:add_proto_expert_info(E.error, "nakcast dissector error: " .. tostring(d))
		pinfo.cols.info:append(" [dissector error]")
		return
	end
	if d.bad then
		pinfo.cols.info:append(" [Malformed]")
	elseif d.short then
		pinfo.cols.info:append(" [capture truncated]")
	end
end

function nakcast.dissector(tvb, pinfo, tree)
	if tvb:len() < 1 then return 0 end
	safe_dissect(tvb, pinfo, tree)
	return tvb:len()
end

-- The heuristic claims a datagram that reads as a nakcast header: major
-- version 1, a known type, a header length at least the type's 1.0 size and
-- within the datagram, AUTH and key id consistent.
local function heuristic(tvb, pinfo, tree)
	local n = tvb:len()
	if n < HEADER_LEN or tvb(0, 1):uint() ~= 1 then return false end
	local spec = types[tvb(2, 1):uint()]
	if not spec then return false end
	local auth = has_flag(tvb(3, 1):uint(), FLAG_AUTH)
	if auth ~= (tvb(20, 2):le_uint() ~= 0) then return false end
	local hlen = tvb(22, 2):le_uint()
	local body_end = tvb:reported_len() - (auth and TRAILER_LEN or 0)
	if hlen < HEADER_LEN + spec.fixed_len or hlen > body_end then return false end
	safe_dissect(tvb, pinfo, tree)
	return true
end

------------------------------------------------------------------------
-- Registration

nakcast.fields = fields
nakcast.prefs.ports = Pref.range("UDP ports", DEFAULT_PORTS,
	"UDP ports always decoded as nakcast (others are claimed by the heuristic)", 65535)

local udp = DissectorTable.get("udp.port")
local registered = DEFAULT_PORTS
udp:add(registered, nakcast)

function nakcast.prefs_changed()
	local ports = tostring(nakcast.prefs.ports)
	if ports ~= registered then
		udp:remove(registered, nakcast)
		registered = ports
		udp:add(registered, nakcast)
	end
end

nakcast:register_heuristic("udp", heuristic)
