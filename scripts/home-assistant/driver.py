#!/usr/bin/env python3
"""Drives a lab Home Assistant through its REST API, as a person would through its UI, and prints JSON.

  driver.py URL onboard TOKENFILE            create the owner, finish onboarding, keep an access token
  driver.py URL mqtt TOKENFILE HOST PORT USER PASSWORD
                                             add the MQTT integration through its config flow
  driver.py URL states TOKENFILE PREFIX      every entity whose id starts with PREFIX: id, state, attributes
  driver.py URL press TOKENFILE ENTITY       press a button entity (button.press)
  driver.py URL device TOKENFILE ENTITY      the device id of an entity (for a page's address)
  driver.py URL ws TOKENFILE MESSAGE...      send each MESSAGE (JSON, without its id) over the websocket API in
                                             turn and print the last result (needs aiohttp: Home Assistant's Python)
  driver.py URL screenshot TOKENFILE PATH FILE DEVTOOLS
                                             the page at PATH as a logged-in browser shows it, through the
                                             DevTools port of a headless Chromium (needs aiohttp: run it with
                                             Home Assistant's own Python)

Apart from `screenshot`, only the standard library: it runs with the lab's python3, inside the lab namespace.
"""
import json
import sys
import urllib.error
import urllib.parse
import urllib.request

CLIENT_ID = None


def call(url, path, body=None, token=None, form=False):
    data = None
    headers = {}
    if body is not None:
        if form:
            data = urllib.parse.urlencode(body).encode()
            headers['Content-Type'] = 'application/x-www-form-urlencoded'
        else:
            data = json.dumps(body).encode()
            headers['Content-Type'] = 'application/json'
    if token:
        headers['Authorization'] = 'Bearer ' + token
    request = urllib.request.Request(url + path, data=data, headers=headers, method='POST' if data else 'GET')
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
        try:
            return json.loads(text) if text else None
        except ValueError:
            return text  # /api/template answers plain text


def main():
    url, command, token_file = sys.argv[1], sys.argv[2], sys.argv[3]
    client_id = url + '/'
    if command == 'onboard':
        user = call(url, '/api/onboarding/users', {
            'client_id': client_id, 'name': 'Lab', 'username': 'lab', 'password': 'lab-password-1',
            'language': 'en'})
        tokens = call(url, '/auth/token', {
            'grant_type': 'authorization_code', 'code': user['auth_code'], 'client_id': client_id}, form=True)
        token = tokens['access_token']
        # The remaining steps only matter to the frontend; core_config sets up integrations that want the
        # internet (a weather service), which the lab namespace has no route to, and may fail for that.
        failed = []
        for step, body in (('core_config', {}), ('analytics', {}),
                           ('integration', {'client_id': client_id, 'redirect_uri': client_id})):
            try:
                call(url, '/api/onboarding/' + step, body, token)
            except urllib.error.HTTPError as error:
                failed.append('%s: %s' % (step, error.code))
        open(token_file, 'w').write(token)
        open(token_file + '.json', 'w').write(json.dumps(tokens))
        print(json.dumps({'ok': True, 'failed': failed}))
        return
    token = open(token_file).read().strip()
    if command == 'mqtt':
        host, port, user, password = sys.argv[4:8]
        flow = call(url, '/api/config/config_entries/flow', {'handler': 'mqtt', 'show_advanced_options': False}, token)
        result = call(url, '/api/config/config_entries/flow/' + flow['flow_id'], {
            'broker': host, 'port': int(port), 'username': user, 'password': password}, token)
        print(json.dumps({'type': result.get('type'), 'errors': result.get('errors')}))
    elif command == 'states':
        prefix = sys.argv[4]
        states = call(url, '/api/states', token=token)
        print(json.dumps([s for s in states if s['entity_id'].split('.', 1)[1].startswith(prefix)]))
    elif command == 'press':
        call(url, '/api/services/button/press', {'entity_id': sys.argv[4]}, token)
        print(json.dumps({'ok': True}))
    elif command == 'screenshot':
        import asyncio
        asyncio.run(screenshot(url, json.load(open(token_file + '.json')), sys.argv[4], sys.argv[5], sys.argv[6]))
        print(json.dumps({'ok': True}))
    elif command == 'ws':
        import asyncio
        print(json.dumps(asyncio.run(websocket(url, token, [json.loads(m) for m in sys.argv[4:]]))))
    elif command == 'device':
        result = call(url, '/api/template', {'template': "{{ device_id('%s') }}" % sys.argv[4]}, token)
        print(json.dumps({'device': result}))


async def websocket(url, token, messages):
    """Sends each message over Home Assistant's websocket API, as the frontend does, and returns the last result;
    an error result is returned as it came, for the caller to show."""
    import asyncio
    import aiohttp
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url.replace('http', 'ws', 1) + '/api/websocket') as socket:
            assert (await socket.receive_json(timeout=30))['type'] == 'auth_required'
            await socket.send_json({'type': 'auth', 'access_token': token})
            assert (await socket.receive_json(timeout=30))['type'] == 'auth_ok'
            result = None
            for number, message in enumerate(messages, start=1):
                await socket.send_json(dict(message, id=number))
                while True:
                    answer = await asyncio.wait_for(socket.receive_json(), 60)
                    if answer.get('id') == number and answer.get('type') == 'result':
                        break
                if not answer.get('success'):
                    return {'error': answer.get('error'), 'message': message}
                result = answer.get('result')
            return {'result': result}


async def screenshot(url, tokens, path, out, devtools):
    """Logs the browser in as the frontend itself does (its tokens in localStorage), opens `path`, and saves a
    PNG once the page has loaded and had a few seconds to draw (bounded)."""
    import asyncio
    import base64
    import time
    import aiohttp
    stored = dict(tokens, hassUrl=url, clientId=url + '/', expires=int(time.time() * 1000) + 1800 * 1000)
    async with aiohttp.ClientSession() as session:
        pages = await (await session.get(devtools + '/json')).json()
        page = next(p for p in pages if p['type'] == 'page')
        async with session.ws_connect(page['webSocketDebuggerUrl'], max_msg_size=0) as socket:
            counter = 0

            async def send(method, params=None):
                nonlocal counter
                counter += 1
                await socket.send_json({'id': counter, 'method': method, 'params': params or {}})
                while True:
                    message = await asyncio.wait_for(socket.receive_json(), 60)
                    if message.get('id') == counter:
                        return message

            async def loaded():
                for _ in range(100):
                    state = await send('Runtime.evaluate', {'expression': 'document.readyState'})
                    if state['result']['result'].get('value') == 'complete':
                        return
                    await asyncio.sleep(0.2)

            await send('Emulation.setDeviceMetricsOverride',
                       {'width': 1280, 'height': 860, 'deviceScaleFactor': 1, 'mobile': False})
            await send('Page.navigate', {'url': url + '/manifest.json'})
            await loaded()
            await send('Runtime.evaluate',
                       {'expression': 'localStorage.setItem("hassTokens", %s)' % json.dumps(json.dumps(stored))})
            await send('Page.navigate', {'url': url + path})
            await loaded()
            # The frontend draws after load, over its websocket: give it a few seconds (a picture, no assertion).
            await asyncio.sleep(8)
            shot = await send('Page.captureScreenshot', {'format': 'png'})
            open(out, 'wb').write(base64.b64decode(shot['result']['data']))


if __name__ == '__main__':
    main()
