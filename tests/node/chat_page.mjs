// The chat page at "/" in headless Chromium (Debian's, through playwright-core): type, send,
// watch the answer stream in with its speed, then stop a long answer at its first piece.
// Reports one JSON line for tests/check_server_clients.py; the screenshot goes to SHOT.
//   node chat_page.mjs BASE_URL API_KEY SHOT
import { chromium } from "playwright-core";

const [base, key, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"],
});
const out = {};
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(60000);
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(base + "/");
  await page.fill("#key", key);
  await page.dispatchEvent("#key", "change");
  await page.reload();  // the key from localStorage, and /props read with it
  await page.waitForFunction(() => !document.getElementById("model").textContent.startsWith("…"));
  out.header = await page.textContent("#model");
  await page.fill("#temperature", "0");
  await page.fill("#max_tokens", "16");
  await page.fill("#input", "Once upon");
  await page.press("#input", "Enter");
  await page.waitForSelector(".msg.assistant .speed");
  out.answer = await page.textContent(".msg.assistant >> nth=0 >> .text");
  out.speed = await page.textContent(".msg.assistant >> nth=0 >> .speed");

  // A long answer, stopped as soon as its first piece shows.
  await page.fill("#max_tokens", "4000");
  await page.fill("#input", "Tell me more");
  await page.click("#send");
  await page.waitForFunction(() => {
    const b = document.querySelectorAll(".msg.assistant");
    return b.length === 2 && b[1].querySelector(".text").textContent.length > 0;
  });
  out.stop_enabled_while_running = await page.isEnabled("#stop");
  await page.click("#stop");
  await page.waitForSelector(".msg.assistant >> nth=1 >> .speed");
  out.stopped_speed = await page.textContent(".msg.assistant >> nth=1 >> .speed");
  out.stopped_chars = (await page.textContent(".msg.assistant >> nth=1 >> .text")).length;
  out.send_enabled_after = await page.isEnabled("#send");
  out.stop_enabled_after = await page.isEnabled("#stop");
  out.errors = errors.concat(await page.$$eval(".msg.error", (els) => els.map((e) => e.textContent)));
  await page.screenshot({ path: shot });
} catch (e) {
  out.exception = String(e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
