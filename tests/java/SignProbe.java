import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Map;
import java.util.TreeMap;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.remoting.CommandCustomHeader;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * What a 4.9.8 Java client with AclClientRPCHook puts on the wire for a request (tests/client/test_credentials_java.py
 * drives it with the requests rocketstream's MQClientAPI sent).
 *
 * One JSON case per stdin line -> one JSON line per case on stdout:
 *   in:  {"code": N, "header": "org.apache...SomeRequestHeader" or absent, "fields": {name: string value},
 *         "body": base64 or absent, "ak": ..., "sk": ..., "token": ... or absent}
 *   out: {"fields": {the extFields as sent, sorted}} or {"error": "..."}
 *
 * With "header" the request is built as the Java client builds it: an instance of that CommandCustomHeader class
 * whose declared fields are set from "fields" (String, int/Integer, long/Long, boolean/Boolean; a name the class
 * does not declare is an error), RemotingCommand.createRequestCommand(code, header); without, the fields are added
 * with addExtField. Then AclClientRPCHook.doBeforeRequest signs it (as NettyRemotingClient.invokeSync /
 * invokeOneway do before writing) and makeCustomHeaderToNet writes the header into the extFields (as encode
 * does).
 */
public class SignProbe {
    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.trim().isEmpty()) {
                continue;
            }
            JSONObject res = new JSONObject();
            try {
                JSONObject c = JSON.parseObject(line);
                RemotingCommand req = build(c);
                SessionCredentials cred = c.getString("token") == null
                    ? new SessionCredentials(c.getString("ak"), c.getString("sk"))
                    : new SessionCredentials(c.getString("ak"), c.getString("sk"), c.getString("token"));
                new AclClientRPCHook(cred).doBeforeRequest("127.0.0.1:1", req);
                req.makeCustomHeaderToNet();
                res.put("fields", new TreeMap<>(req.getExtFields()));
            } catch (Exception e) {
                res.put("error", e.toString());
            }
            out.println(res.toJSONString());
        }
    }

    private static RemotingCommand build(JSONObject c) throws Exception {
        int code = c.getIntValue("code");
        JSONObject fields = c.getJSONObject("fields");
        String headerClass = c.getString("header");
        RemotingCommand req;
        if (headerClass != null) {
            Class<?> cls = Class.forName(headerClass);
            CommandCustomHeader h = (CommandCustomHeader) cls.getDeclaredConstructor().newInstance();
            for (Map.Entry<String, Object> e : fields.entrySet()) {
                set(h, cls.getDeclaredField(e.getKey()), e.getValue() == null ? null : e.getValue().toString());
            }
            req = RemotingCommand.createRequestCommand(code, h);
        } else {
            req = RemotingCommand.createRequestCommand(code, null);
            if (fields != null) {
                for (Map.Entry<String, Object> e : fields.entrySet()) {
                    req.addExtField(e.getKey(), e.getValue() == null ? null : e.getValue().toString());
                }
            }
        }
        String body = c.getString("body");
        if (body != null) {
            req.setBody(Base64.getDecoder().decode(body));
        }
        return req;
    }

    private static void set(Object h, Field f, String v) throws Exception {
        if (Modifier.isStatic(f.getModifiers())) {
            throw new IllegalArgumentException("static field " + f.getName());
        }
        f.setAccessible(true);
        Class<?> t = f.getType();
        if (v == null) {
            f.set(h, null);
        } else if (t == String.class) {
            f.set(h, v);
        } else if (t == Integer.class || t == int.class) {
            f.set(h, Integer.valueOf(v));
        } else if (t == Long.class || t == long.class) {
            f.set(h, Long.valueOf(v));
        } else if (t == Boolean.class || t == boolean.class) {
            f.set(h, Boolean.valueOf(v));
        } else {
            throw new IllegalArgumentException("field " + f.getName() + " has type " + t.getName());
        }
    }
}
