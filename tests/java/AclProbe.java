import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Map;
import java.util.TreeMap;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.common.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.common.protocol.header.SendMessageRequestHeaderV2;
import org.apache.rocketmq.remoting.CommandCustomHeader;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyRemotingClient;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * The Java side of rocketstream's ACL tests (tests/broker/test_acl.py drives it).
 *
 *   sign             one JSON case per stdin line -> one JSON line per case on stdout:
 *                    {"fields": {...extFields as sent, Signature included...}, "signature": "..."}
 *   send HOST:PORT   the same cases, each sent to a broker with NettyRemotingClient.invokeSync;
 *                    the output line also has "code" and "remark" of the broker's response.
 *
 * A case: {"code": N, "fields": {k: v, ...}, "body": base64 or absent,
 *          "header": "pullV1" | "sendV2" | absent (build the extFields from a custom header object
 *                    with these values instead: makeCustomHeaderToNet, as the client does),
 *          "ak": ..., "sk": ..., "token": ... (absent ak: the request is not signed)}.
 * Signing is AclClientRPCHook.doBeforeRequest, exactly as a Java client with that hook does it.
 */
public class AclProbe {
    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        boolean send = args.length >= 2 && args[0].equals("send");
        if (!send && !(args.length == 1 && args[0].equals("sign"))) {
            System.err.println("usage: AclProbe sign | send HOST:PORT  (cases on stdin, one JSON per line)");
            System.exit(2);
        }
        NettyRemotingClient client = null;
        if (send) {
            client = new NettyRemotingClient(new NettyClientConfig());
            client.start();
        }
        try {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.trim().isEmpty()) {
                    continue;
                }
                JSONObject c = JSON.parseObject(line);
                RemotingCommand req = build(c);
                JSONObject res = new JSONObject();
                if (c.getString("ak") != null) {
                    SessionCredentials cred = c.getString("token") == null
                        ? new SessionCredentials(c.getString("ak"), c.getString("sk"))
                        : new SessionCredentials(c.getString("ak"), c.getString("sk"), c.getString("token"));
                    new AclClientRPCHook(cred).doBeforeRequest(null, req);
                    res.put("signature", req.getExtFields().get(SessionCredentials.SIGNATURE));
                }
                req.makeCustomHeaderToNet();
                res.put("fields", req.getExtFields() == null ? null : new TreeMap<>(req.getExtFields()));
                if (send) {
                    RemotingCommand resp = client.invokeSync(args[1], req, 10000);
                    res.put("code", resp.getCode());
                    res.put("remark", resp.getRemark());
                }
                out.println(res.toJSONString());
            }
        } finally {
            if (client != null) {
                client.shutdown();
            }
        }
    }

    private static RemotingCommand build(JSONObject c) {
        int code = c.getIntValue("code");
        JSONObject fields = c.getJSONObject("fields");
        String header = c.getString("header");
        CommandCustomHeader h = null;
        if ("pullV1".equals(header)) {
            PullMessageRequestHeader p = new PullMessageRequestHeader();
            p.setConsumerGroup(fields.getString("consumerGroup"));
            p.setTopic(fields.getString("topic"));
            p.setQueueId(fields.getInteger("queueId"));
            p.setQueueOffset(fields.getLong("queueOffset"));
            p.setMaxMsgNums(fields.getInteger("maxMsgNums"));
            p.setSysFlag(fields.getInteger("sysFlag"));
            p.setCommitOffset(fields.getLong("commitOffset"));
            p.setSuspendTimeoutMillis(fields.getLong("suspendTimeoutMillis"));
            p.setSubscription(fields.getString("subscription"));
            p.setSubVersion(fields.getLong("subVersion"));
            p.setExpressionType(fields.getString("expressionType"));
            h = p;
        } else if ("sendV2".equals(header)) {
            SendMessageRequestHeaderV2 s = new SendMessageRequestHeaderV2();
            s.setA(fields.getString("a"));
            s.setB(fields.getString("b"));
            s.setC(fields.getString("c"));
            s.setD(fields.getInteger("d"));
            s.setE(fields.getInteger("e"));
            s.setF(fields.getInteger("f"));
            s.setG(fields.getLong("g"));
            s.setH(fields.getInteger("h"));
            s.setI(fields.getString("i"));
            s.setJ(fields.getInteger("j"));
            s.setK(fields.getBoolean("k"));
            s.setL(fields.getInteger("l"));
            s.setM(fields.getBoolean("m"));
            h = s;
        }
        RemotingCommand req = RemotingCommand.createRequestCommand(code, h);
        if (h == null && fields != null) {
            for (Map.Entry<String, Object> e : fields.entrySet()) {
                req.addExtField(e.getKey(), e.getValue() == null ? null : e.getValue().toString());
            }
        }
        String body = c.getString("body");
        if (body != null) {
            req.setBody(Base64.getDecoder().decode(body));
        }
        return req;
    }
}
