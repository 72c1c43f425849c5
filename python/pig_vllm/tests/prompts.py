"""Prompts of the tests: the `./pig run` demo prompt (tools/pig-run/demo.cpp, rebuilt here) and
plain text of chosen lengths."""
import os

GPL = "/usr/share/common-licenses/GPL-3"  # Debian's base-files, what pig-run --demo reads
CITIES = ["Lisbon", "Oslo", "Nairobi", "Montreal", "Kyoto", "Valparaiso", "Dublin", "Tallinn",
          "Reykjavik", "Marrakesh", "Helsinki", "Auckland"]


class MT19937_64:
    """std::mt19937_64 (the C++ standard's parameters), for pig-run's seeded choices."""
    N, M = 312, 156
    MASK = (1 << 64) - 1

    def __init__(self, seed: int):
        self.mt = [0] * self.N
        self.mt[0] = seed & self.MASK
        for i in range(1, self.N):
            prev = self.mt[i - 1]
            self.mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & self.MASK
        self.i = self.N

    def __call__(self) -> int:
        if self.i >= self.N:
            upper, lower = 0xFFFFFFFF80000000, 0x7FFFFFFF
            for k in range(self.N):
                x = (self.mt[k] & upper) | (self.mt[(k + 1) % self.N] & lower)
                xa = x >> 1
                if x & 1:
                    xa ^= 0xB5026F5AA96619E9
                self.mt[k] = self.mt[(k + self.M) % self.N] ^ xa
            self.i = 0
        y = self.mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & self.MASK


def gpl_text(max_bytes: int = 12000) -> str:
    with open(GPL, "rb") as f:
        raw = f.read(max_bytes + 1)
    text = raw[:max_bytes]
    if len(raw) > max_bytes:
        cut = text.rfind(b"\n\n")
        if cut < 0 or cut < len(text) // 2:
            cut = text.rfind(b"\n")
        if cut < 0 or cut < len(text) // 2:
            cut = len(text)
            while cut > 0 and (text[cut] & 0xC0) == 0x80:
                cut -= 1
        text = text[:cut]
    return text.rstrip(b" \t\r\n\v\f").decode("utf-8")


def demo_prompt(seed: int = 1, max_bytes: int = 12000):
    """(prompt, city): the chat message pig-run --demo --demo-seed SEED asks (demo.cpp)."""
    text = gpl_text(max_bytes)
    sep = "\n\n" if "\n\n" in text else "\n"
    at, p = [], text.find(sep)
    while p >= 0:
        at.append(p)
        p = text.find(sep, p + len(sep))
    # byte offsets in C++; GPL-3 is ASCII, so characters are bytes
    at = [p for p in at if p <= len(text) * 9 // 10] or [0]
    rng = MT19937_64(seed)
    city = CITIES[rng() % len(CITIES)]
    where = at[rng() % len(at)]
    planted = text[:where] + (sep if where > 0 else "") + f"The author of this text lives in {city}."
    if where == 0:
        planted += sep
    planted += text[where:]
    prompt = ("Read this text, then answer the question after it.\n\n" + planted +
              "\n\nQuestion: In which city does the author of this text live?")
    return prompt, city, where / len(text)


def text_prompt(tokenizer, tokens: int, offset: int = 0) -> list[int]:
    """About `tokens` token ids of the GPL's text (from `offset` characters on)."""
    text = gpl_text(60000)[offset:]
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) >= tokens, (len(ids), tokens)
    return ids[:tokens]


if __name__ == "__main__":
    p, c, d = demo_prompt(int(os.environ.get("SEED", "1")))
    print(c, f"{100 * d:.0f} %", len(p))
